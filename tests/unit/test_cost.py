"""CPU per unit of work, split in and out of the environment, on real recorded telemetry
(tests/data/cost: native and runc running xz and iperf3 on this machine)."""

from __future__ import annotations

import json

import pytest
from support import DATA

from isotax.analysis import cost
from isotax.analysis.cost import Cost, scale_for, summarize
from isotax.telemetry.summary import TelemetrySummary


def _load(name: str) -> dict:
    return json.loads((DATA / "cost" / f"{name}.json").read_text())


def split(s: dict) -> Cost | None:
    """cost.split of a summary as the store keeps it."""
    return cost.split(TelemetrySummary.from_json(s))


@pytest.mark.parametrize("name", ["native-compress-1", "runc-compress-1",
                                  "native-throughput-1", "runc-throughput-1"])
def test_split_adds_up_to_the_host_less_client_and_strangers(name: str) -> None:
    s = _load(name)
    c = split(s)
    assert c is not None
    amount = s["work"]["amount"]
    g = s["groups"]
    assert c.inside == pytest.approx(s["inside"]["cpu_s"] / amount)
    expected_hidden = max(0.0, s["host_cpu_s"]["busy"] - s["inside"]["cpu_s"]
                          - s["loadgen"]["cpu_s"] - g["other"]["cpu_s"] - g["isotax"]["cpu_s"])
    assert c.hidden == pytest.approx(expected_hidden / amount)
    assert c.total == pytest.approx(c.inside + c.hidden)
    assert c.unit == "GB"


def test_xz_cost_is_its_own_work() -> None:
    """xz's CPU is the environment's own: per GB of corpus, in both environments, what the
    cgroup counted (xz at level 2 here: ~170 CPU-s per GB) and nearly nothing hidden."""
    for env in ("native", "runc"):
        c = split(_load(f"{env}-compress-1"))
        assert c is not None
        assert 100 < c.inside < 300
        assert c.hidden < 0.1 * c.inside
        assert c.loadgen == 0.0


def test_iperf3_cost_shows_the_client_apart() -> None:
    """The load generator's iperf3 client used more CPU per GB than the server inside, and
    is reported beside the cost, never in it."""
    for env in ("native", "runc"):
        c = split(_load(f"{env}-throughput-1"))
        assert c is not None and c.loadgen is not None
        assert c.loadgen > c.inside > 0


def test_no_work_or_no_parts_gives_no_cost() -> None:
    s = _load("native-compress-1")
    assert split({**s, "work": {"amount": 0, "unit": "GB"}}) is None
    assert split({k: v for k, v in s.items() if k != "inside"}) is None
    assert split({**s, "work": None}) is None


def test_summarize_and_scale() -> None:
    costs = [Cost("GB", 1.0, 0.5, None), Cost("GB", 3.0, 0.5, 2.0)]
    m = summarize(costs)
    assert m is not None
    assert (m.inside, m.hidden, m.total, m.loadgen, m.n) == (2.0, 0.5, 2.5, 2.0, 2)
    assert m.total_sd == pytest.approx(2 ** 0.5)
    assert summarize([]) is None
    assert scale_for([0.0004, 0.0002]) == (1e-6, "CPU-µs")
    assert scale_for([2.5]) == (1.0, "CPU-s")
    assert scale_for([0.05]) == (1e-3, "CPU-ms")
