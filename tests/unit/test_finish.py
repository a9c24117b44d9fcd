"""Finishing a measured cell (isotax.run.finish): the runner's own sample, the NUMA label and
the run's work, added in one place whichever way the workload ran."""

from __future__ import annotations

import json

from support import DATA

from isotax import protocols
from isotax.model import Sample
from isotax.run.finish import NUMA_LABEL, finish_cell
from isotax.telemetry.observe import Observation
from isotax.telemetry.summary import TelemetrySummary, Work


def _watched() -> Observation:
    d = json.loads((DATA / "telemetry" / "summary-runc-rr-tcp.json").read_text())
    del d["work"]  # as the observer leaves it
    return Observation(TelemetrySummary.from_json(d), {"t": [0.5]})


def test_a_watched_run_gets_its_work_the_runners_sample_and_the_numa_label() -> None:
    rr = protocols.workloads()["rr"]()
    params = {"proto": "tcp", "seconds": 1}
    measured = [Sample("transactions_per_s", 9000.0, "1/s", labels={"transactions": 9000})]
    env_cpu = Sample("env_host_cpu_s", 0.25, "CPU-s", higher_is_better=False)
    done = finish_cell(rr, params, measured, env_cpu, 0.98765, _watched())
    assert [s.metric for s in done.samples] == ["transactions_per_s", "env_host_cpu_s"]
    assert all(s.labels[NUMA_LABEL] == 0.9877 for s in done.samples)
    assert done.samples[0].labels["transactions"] == 9000  # the workload's own labels stay
    assert done.telemetry is not None
    summary, series = done.telemetry
    assert summary.work == Work(9000.0, "transaction", 1)
    assert series == {"t": [0.5]}


def test_a_launching_or_unwatched_run_on_one_node() -> None:
    compress = protocols.workloads()["compress"]()
    measured = [Sample("throughput", 10.0, "MB/s")]
    done = finish_cell(compress, {"corpus_mib": 16}, measured, None, None, None)
    assert done.samples == tuple(measured) and done.telemetry is None
    # a watched one that could not be summarised (the observation says why) has none either
    assert finish_cell(compress, {"corpus_mib": 16}, measured, None, None,
                       Observation(error="telemetry: needs two ticks")).telemetry is None


def test_work_is_per_run_when_the_workload_cannot_tell() -> None:
    rr = protocols.workloads()["rr"]()
    done = finish_cell(rr, {}, [Sample("latency_us", 50.0, "us", False)], None, None,
                       _watched())
    assert done.telemetry is not None and done.telemetry[0].work == Work(1.0, "run", 1)
