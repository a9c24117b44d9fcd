"""Reports render from the store alone: Table 1 form, ratios, CSV, JSON, warnings."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from support import DATA

from isotax.analysis.report_data import analyze
from isotax.host.facts.description import EnvironmentDescription
from isotax.model import FORMAT_VERSION, CellKey, CellStatus, Sample
from isotax.report import csv_report, json_report, markdown, write_reports
from isotax.store.base import CellOutcome, EnvRecord
from isotax.store.sqlite import SQLiteStore

PLAN = 'name = "t"\nrepetitions = 3\n'


@pytest.fixture
def store(tmp_path: Path) -> SQLiteStore:
    s = SQLiteStore(tmp_path / "isotax.db")
    s.create_run("r1", "t", PLAN, 1, {"hostname": "box|1", "kernel": "6.1", "runtimes": {}})
    tools = {"xz-utils": "5.4.1-1"}
    s.put_environment(EnvRecord("r1", "native", "native", True, "",
                                EnvironmentDescription.from_stored({}), tools, {"ready": 0.0}))
    s.put_environment(EnvRecord("r1", "runc", "runc", True, "",
                                EnvironmentDescription.from_stored({"network": "bridge"}),
                                {"xz-utils": "5.4.1-0.2"}, {"ready": 0.03}))
    s.put_environment(EnvRecord("r1", "qemu", "qemu", True, "",
                                EnvironmentDescription.from_stored(
                                    {"accelerator": "tcg", "emulated": "yes"}),
                                tools, {"ready": 3.1}))
    s.put_environment(EnvRecord("r1", "gone", "crun", False, "crun is not installed",
                                EnvironmentDescription.from_stored({}), {}, {}))
    data = {"native": [100.0, 101.0, 99.0], "runc": [99.5, 100.5, 100.0], "qemu": [20, 21, 19]}
    for env, vals in data.items():
        for i, v in enumerate(vals):
            key = CellKey(env, "compress", {"level": 2}, i + 1)
            s.commit_cell("r1", key, "1",
                          CellOutcome(CellStatus.OK, "", [Sample("throughput", v, "MB/s")]), 0, 1)
        s.commit_cell("r1", CellKey(env, "compress", {"level": 2}, 1, warmup=True), "1",
                      CellOutcome(CellStatus.OK, "", [Sample("throughput", 1.0, "MB/s")]), 0, 1)
    s.commit_cell("r1", CellKey("runc", "compress", {"level": 2}, 4), "1",
                  CellOutcome(CellStatus.FAILED, "SanityError: xz output size differs"), 0, 1)
    s.set_run_status("r1", "complete", 2.0)
    return s


def test_table1_form_and_verdicts(store: SQLiteStore) -> None:
    d = analyze(store, "r1")
    assert d.columns == ["native", "runc", "qemu"]
    md = markdown.render(d)
    assert "| compress |  | throughput ↑ | MB/s | 100 [1.00] |" in md
    assert "- compress: level=2" in md
    assert "-80.0%" in md and "qemu (emulated)" in md and "EMULATED" in md
    runc_cell = d.cells[(d.rows[0], "runc")]
    # 1.00 on 3 pairs: no evidence of equivalence yet (a tight interval is not enough)
    assert runc_cell.ratio is not None and runc_cell.ratio.decided == "undecided"
    assert runc_cell.ratio.within_noise is False and " ?" in md
    assert "worse by 80.0%" in md  # qemu's, decided from 3 pairs
    assert "Verdicts: 1 of 2 headline ratios to native decided (1 worse); 1 undecided." in md
    assert "box\\|1" in md  # host strings cannot break the table
    assert "crun is not installed" in md


def test_warmups_excluded_and_failures_listed(store: SQLiteStore) -> None:
    d = analyze(store, "r1")
    assert d.cells[(d.rows[0], "native")].summary.n == 3
    assert len(d.failures) == 1 and "xz output size differs" in markdown.render(d)


def test_warnings_say_what_to_do(store: SQLiteStore) -> None:
    w = " ".join(analyze(store, "r1").warnings)
    assert "TCG software emulation" in w and "not KVM's overhead" in w
    assert "xz-utils differs between runc (5.4.1-0.2) and native (5.4.1-1)" in w
    assert "gone did not run: crun is not installed" in w
    assert "1 cell(s) of runc failed" in w
    # A run recorded before the image's release was a choice: the old fix, no release named.
    assert "install the same package version on the host as in the image" in w


def test_the_image_release_in_the_header_and_the_version_fix(store: SQLiteStore) -> None:
    """The run's image (run meta "image") in both reports' headers; a tool that differs
    between native and an image of another release names the release choice as the fix."""
    from isotax.report import html

    store.put_run_meta("r1", "image", {
        "hash": "0123456789abcdef", "kernel": "6.12.57+deb13-amd64", "distribution": "trixie",
        "version": "13", "chosen_by": "plan", "host_distribution": "bookworm",
        "host_os": "Debian GNU/Linux 12 (bookworm)"})
    d = analyze(store, "r1")
    md = markdown.render(d)
    header = md.split("## ", 1)[0]
    assert ("Workload image: Debian 13 (trixie), chosen by the plan's [image] distribution "
            "(recipe 0123456789abcdef, kernel 6.12.57+deb13-amd64). The host is Debian "
            "GNU/Linux 12 (bookworm): native ran the host's packages, not the image's "
            "versions.") in header
    assert "Workload image: Debian 13 (trixie)" in html.render(d).split("<h2", 1)[0]
    w = " ".join(d.warnings)
    assert ("xz-utils differs between runc (5.4.1-0.2) and native (5.4.1-1): the image is "
            "Debian 13 (trixie) and the host Debian GNU/Linux 12 (bookworm); for the same "
            'bits build the image from the host\'s release ([image] distribution = "bookworm" '
            "in the plan, or none: the host's release is the default); or install the image's "
            "package version on the host.") in w
    # The host's own release: the header says so, and the fix is the package version.
    store.put_run_meta("r1", "image", {
        "hash": "0123456789abcdef", "kernel": "6.1.0-40-amd64", "distribution": "bookworm",
        "version": "12", "chosen_by": "host", "host_distribution": "bookworm",
        "host_os": "Debian GNU/Linux 12 (bookworm)"})
    d = analyze(store, "r1")
    assert "Workload image: Debian 12 (bookworm), the host's own release (recipe" in \
        markdown.render(d)
    assert "native ran the host's packages" not in markdown.render(d)
    assert "install the same package version on the host as in the image" in " ".join(
        d.warnings)


def test_csv_and_json(store: SQLiteStore, tmp_path: Path) -> None:
    d = analyze(store, "r1")
    rows = list(csv.DictReader(io.StringIO(csv_report.render(d))))
    assert {r["environment"] for r in rows} == {"native", "runc", "qemu"}
    q = next(r for r in rows if r["environment"] == "qemu")
    assert float(q["ratio"]) == pytest.approx(0.2) and q["emulated"] == "True"
    doc = json.loads(json_report.render(d))
    assert doc["format_version"] == FORMAT_VERSION == 2 and doc["baseline"] == "native"
    assert any(e["emulated"] for e in doc["environments"])
    paths = write_reports(d, tmp_path / "out")
    assert sorted(p.name for p in paths) == ["report.html", "report.md", "results.csv",
                                             "results.json"]


def test_sweep_axes_in_rows_common_parameters_once(tmp_path: Path) -> None:
    s = SQLiteStore(tmp_path / "isotax.db")
    plan = 'name = "t"\n[[workloads]]\nname = "linpack"\n[[workloads]]\nname = "compress"\n'
    s.create_run("r2", "t", plan, 1, {})
    s.put_environment(EnvRecord("r2", "native", "native", True, "",
                                EnvironmentDescription.from_stored({}), {}, {}))
    for rep in (1, 2):
        for threads in (1, 2):
            s.commit_cell("r2", CellKey("native", "compress", {"level": 2, "threads": threads},
                                        rep), "1",
                          CellOutcome(CellStatus.OK, "",
                                      [Sample("throughput", 10.0 * threads + rep, "MB/s")]), 0, 1)
        s.commit_cell("r2", CellKey("native", "linpack", {"n": 1000}, rep), "1",
                      CellOutcome(CellStatus.OK, "", [Sample("hpl", 50.0 + rep, "GFLOPS")]), 0, 1)
    d = analyze(s, "r2")
    assert [r.workload for r in d.rows] == ["linpack", "compress", "compress"]  # plan order
    assert d.common_params == {"compress": {"level": 2}, "linpack": {"n": 1000}}
    md = markdown.render(d)
    assert "| compress | threads=1 | throughput ↑ |" in md
    assert "| compress | threads=2 | throughput ↑ |" in md
    assert "| linpack |  | hpl ↑ |" in md


def test_startup_and_density_sections(store: SQLiteStore) -> None:
    # Two repetitions of a startup cell and one density cell per environment.
    phases = {"native": (0.1, 0.4, 1.0, 17.0, 1.5), "qemu": (35.0, 134.0, 5990.0, 8170.0, 325)}
    for env, (create, started, first, ready, stop) in phases.items():
        for rep in (1, 2):
            got = {"create": create, "started": started, "first_instruction": first,
                   "ready": ready * rep, "stop": stop}
            samples = [Sample(f"{p}{suffix}", v * k, "ms", False)
                       for p, v in got.items() for suffix, k in (("_ms", 1), ("_p95_ms", 2))]
            store.commit_cell("r1", CellKey(env, "startup", {"starts": 3}, rep), "1",
                              CellOutcome(CellStatus.OK, "", samples), 0, 1)
        idle = 373.0 if env == "qemu" else 0.197
        store.commit_cell("r1", CellKey(env, "density", {"max_instances": 3}, 1), "1",
                          CellOutcome(CellStatus.OK, "",
                                      [Sample("idle_instance_mib", idle, "MiB", False),
                                       Sample("instances", 3, "instances")]), 0, 1)
    md = markdown.render(analyze(store, "r1"))
    startup = md[md.index("### Startup phases"):md.index("### Memory footprint")]
    # Means over the repetitions of each cell's median (and p95); seconds from 1 s up.
    assert "| native | 0.1 ms (0.2 ms) | 0.4 ms (0.8 ms) | 1 ms (2 ms) | 25.5 ms (51 ms) |" \
        in startup
    assert "| qemu (emulated) | 35 ms (70 ms) | 134 ms (268 ms) | 5.99 s (11.98 s) | " \
        "12.26 s (24.51 s) | 325 ms (650 ms) |" in startup
    assert "| runc | — | — |" in startup  # ran, but not this workload
    density = md[md.index("### Memory footprint"):]
    assert "| native | 0.197 | — | 3 | — | — |" in density
    assert "| qemu (emulated) | 373 | — | 3 |" in density


SWEEP_PLAN = """
name = "sweep"
repetitions = 2
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "runc"
kind = "runc"
[[workloads]]
name = "redis"
params = { connections = [1, 2, 4, 16] }
"""


def test_sweep_rows_in_plan_order_and_zero_baselines(tmp_path: Path) -> None:
    s = SQLiteStore(tmp_path / "isotax.db")
    s.create_run("r2", "sweep", SWEEP_PLAN, 1, {"hostname": "h"})
    for env in ("native", "runc"):
        s.put_environment(EnvRecord("r2", env, env, True, "",
                                    EnvironmentDescription.from_stored({}), {}, {}))
        # Committed in text order (16 before 2), as a shuffled run may.
        for conns in (1, 16, 2, 4):
            params = {"connections": conns, "keyspace": 100000, "pipeline": 10,
                      "requests": 100000, "value_bytes": 50, "keepalive": True}
            for rep in (1, 2):
                errors = 0.0 if env == "native" else float(rep)
                s.commit_cell("r2", CellKey(env, "redis", params, rep), "1",
                              CellOutcome(CellStatus.OK, "",
                                          [Sample("requests_per_s", 1000.0 * conns + rep, "req/s"),
                                     Sample("errors", errors, "count", False)]), 0, 1)
    s.set_run_status("r2", "complete", 2.0)
    d = analyze(s, "r2")
    s.close()
    assert [d.sweep_label[(r.workload, r.params_key)] for r in d.rows
            if r.metric == "requests_per_s"] == [f"connections={c}" for c in (1, 2, 4, 16)]
    err = next(r for r in d.rows if r.metric == "errors")
    # No errors natively: no ratio to zero, but the cell is there and the report renders.
    assert d.cells[(err, "runc")].ratio is None and d.cells[(err, "runc")].summary.mean == 1.5
    assert "| redis | connections=16 | errors ↓ | count | 0 [0] | 1.50 [0.707] |" \
        in markdown.render(d)


def test_other_blas_kernels_than_the_baseline_are_warned_about(store: SQLiteStore) -> None:
    for env, core in (("native", "Cooperlake"), ("runc", "Cooperlake"), ("qemu", "Opteron")):
        for rep in (1, 2):
            store.commit_cell("r1", CellKey(env, "linpack", {"n": 200}, rep), "1",
                              CellOutcome(CellStatus.OK, "", [
                                  Sample("hpl", 10.0, "GFLOPS", labels={"blas_core": core})]),
                              0, 1)
    w = [x for x in analyze(store, "r1").warnings if "OpenBLAS ran" in x]
    assert w == [w[0]] and "Opteron kernels in qemu but Cooperlake in native (linpack)" in w[0]


def test_host_fingerprint_in_the_report(tmp_path: Path) -> None:
    from isotax.host.facts.fingerprint import fingerprint

    host = fingerprint(DATA / "host" / "this-host")
    s = SQLiteStore(tmp_path / "isotax.db")
    s.create_run("r3", "t", PLAN, 1, host)
    s.put_environment(EnvRecord("r3", "native", "native", True, "",
                                EnvironmentDescription.from_stored({}), {}, {"ready": 0.0}))
    s.commit_cell("r3", CellKey("native", "compress", {}, 1), "1",
                  CellOutcome(CellStatus.OK, "", [Sample("throughput", 1.0, "MB/s")]), 0, 1)
    md = markdown.render(analyze(s, "r3"))
    s.close()
    assert "Host fingerprint" in md and "| SMT | off" in md
    assert "| governor | none: no cpufreq" in md


def test_outliers_are_flagged_and_kept(store: SQLiteStore) -> None:
    for rep, v in enumerate([60.0, 60.4, 60.2, 59.4, 47.1], start=1):
        store.commit_cell("r1", CellKey("native", "stream", {}, rep), "1",
                          CellOutcome(CellStatus.OK, "", [Sample("triad", v, "MB/s")]), 0, 1)
    d = analyze(store, "r1")
    (w,) = [x for x in d.warnings if "outlying" in x]
    assert w.startswith("native: 1 outlying value(s) (modified z-score beyond 3.5) in stream "
                        "triad")
    assert "| native | stream |  | triad | 5 | 47.1 MB/s | -" in markdown.render(d)
    triad = next(c for (r, e), c in d.cells.items() if r.metric == "triad" and e == "native")
    assert triad.summary.n == 5  # kept, never dropped
    doc = json.loads(json_report.render(d))
    assert [(o["repetition"], o["value"]) for o in doc["outliers"]] == [(5, 47.1)]
