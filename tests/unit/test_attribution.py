"""Attribution to layers: which environment pairs differ in one setting, and the report's
section built from a store."""

from __future__ import annotations

import json
import math
from pathlib import Path

from isotax.analysis.attribution import settings, single_layer_pairs
from isotax.analysis.report_data import analyze
from isotax.analysis.verdicts import Verdict, decide_by_round
from isotax.host.facts.description import EnvironmentDescription
from isotax.model import CellKey, CellStatus, Sample
from isotax.report import json_report, markdown
from isotax.store.base import CellOutcome, EnvRecord
from isotax.store.sqlite import SQLiteStore

ENVS = [
    {"name": "native", "kind": "native"},
    {"name": "runc", "kind": "runc", "network": "bridge"},
    {"name": "runc-host", "kind": "runc", "network": "host"},
    {"name": "crun", "kind": "crun"},  # network host by default
    {"name": "qemu-untuned", "kind": "qemu", "network": "bridge",
     "options": {"profile": "untuned"}},
    {"name": "qemu-tuned", "kind": "qemu", "network": "bridge", "options": {"profile": "tuned"}},
    {"name": "qemu-pin", "kind": "qemu", "network": "bridge",
     "options": {"profile": "untuned", "pin": True}},
]


def test_settings_use_the_plans_defaults_and_flatten_options() -> None:
    s = settings({"name": "x", "kind": "qemu", "memory_mib": 2048, "options": {"pin": True}})
    assert s["network"] == "host" and s["storage"] == "volume" and s["memory_mib"] == "2048"
    assert s["options.pin"] == "True" and s["vcpus"] == "(unset)"


def test_only_pairs_that_differ_in_one_setting() -> None:
    names = [e["name"] for e in ENVS]
    pairs = {(p.before_env, p.after_env): p for p in single_layer_pairs(ENVS, names)}
    assert set(pairs) == {("runc", "runc-host"), ("runc-host", "crun"),
                          ("qemu-untuned", "qemu-tuned"), ("qemu-untuned", "qemu-pin")}
    assert pairs[("runc", "runc-host")].words() == "network: bridge → host"
    assert pairs[("runc-host", "crun")].words() == "kind: runc → crun"
    assert pairs[("qemu-untuned", "qemu-pin")].words() == "options.pin: (unset) → True"
    # An environment that did not run pairs with nothing.
    assert all("runc-host" not in k for k in
               {(p.before_env, p.after_env) for p in single_layer_pairs(ENVS, ["runc", "crun"])})


PLAN = """
name = "layers"
repetitions = 3
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "runc"
kind = "runc"
network = "bridge"
[[environments]]
name = "runc-host"
kind = "runc"
network = "host"
"""


def test_report_names_the_layer_and_what_it_cost(tmp_path: Path) -> None:
    s = SQLiteStore(tmp_path / "isotax.db")
    s.create_run("r", "layers", PLAN, 1, {"hostname": "h"})
    # NAT doubles the latency and leaves throughput alone.
    data = {"native": ([10.0, 10.5, 9.5], [100.0, 101.0, 99.0]),
            "runc": ([20.0, 21.0, 19.0], [100.5, 99.5, 100.0]),
            "runc-host": ([10.2, 10.4, 9.9], [99.0, 101.0, 100.5])}
    for env, (lat, thr) in data.items():
        s.put_environment(EnvRecord("r", env, env.split("-")[0], True, "",
                                    EnvironmentDescription.from_stored({}), {}, {}))
        for i in range(3):
            s.commit_cell("r", CellKey(env, "rr", {"proto": "tcp"}, i + 1), "1",
                          CellOutcome(CellStatus.OK, "",
                                      [Sample("latency_us", lat[i], "µs", False),
                                     Sample("throughput", thr[i], "Gbit/s")]), 0, 1)
    s.set_run_status("r", "complete", 1.0)
    d = analyze(s, "r")
    s.close()
    assert [lay.words() for lay in d.layers] == ["network: bridge → host"]
    md = markdown.render(d)
    section = md[md.index("## Attribution to layers"):md.index("## Tool versions")]
    assert "| network: bridge → host | runc → runc-host | 2 | 1 |" in section
    assert "| network: bridge → host | runc → runc-host | rr |  | latency_us |" in section \
        and "better" in section
    assert "throughput" not in section  # not worse or better: counted, not listed
    # The verdicts' words, from the rounds' pairs: the same machinery as the headline's.
    assert "better by 49.1% (3 pairs)" in section
    doc = json.loads(json_report.render(d))
    lat = next(x for x in doc["layers"] if x["metric"] == "latency_us")
    assert lat["before_environment"] == "runc" and 0.45 < lat["ratio"] < 0.55
    assert lat["verdict"] == "better" and lat["pairs"] == 3 and lat["margin"] > 0
    thr = next(x for x in doc["layers"] if x["metric"] == "throughput")
    assert thr["verdict"] in ("equivalent", "undecided")


def test_a_layer_is_judged_on_the_rounds_both_ran() -> None:
    """Round r of one environment pairs with round r of the other: a drift that both share
    cancels (here the host slows by half in round 3, for both), and a round only one ran
    is left out."""
    before = {1: 10.0, 2: 10.1, 3: 20.0, 4: 9.9, 5: 10.0, 6: 10.05}
    after = {1: 10.02, 2: 10.12, 3: 20.01, 4: 9.93, 5: 10.01, 6: 10.04, 7: 30.0}
    v = decide_by_round(after, before, higher_is_better=False, margin=0.05)
    assert v is not None and v.n == 6 and abs(v.ratio - 1.0) < 0.01
    assert v.verdict is Verdict.EQUIVALENT, v
    # The same values unpaired (shuffled rounds) cannot say as much: the drift is in them.
    shuffled = dict(zip(sorted(after), [after[k] for k in (3, 1, 2, 7, 4, 5, 6)], strict=True))
    w = decide_by_round(shuffled, before, higher_is_better=False, margin=0.05)
    assert w is not None and w.verdict is not Verdict.EQUIVALENT, w
    assert decide_by_round({1: 1.0}, {2: 1.0}, False, 0.05) is None


def test_a_layer_its_workload_cannot_touch_is_not_called_worse_or_better() -> None:
    """The built-in negative control, on recorded data (tests/data/verdicts, 40 interleaved
    rounds of runc on a bridge and runc on the host's network, 2026-11-29): the network layer
    moves TCP_RR and nothing that uses no network (compress, STREAM) or only the disk (fio)."""
    rec = json.loads((Path(__file__).parent.parent /
                      "data/verdicts/sequences-2026-11-29-fixed.json").read_text())
    by = {(s["environment"], s["workload"]): s for s in rec["sequences"]}
    seen = {}
    for wl in ("compress", "stream", "fio", "rr"):
        before, after = by[("runc", wl)], by[("runc-host", wl)]
        # Each side's value over native in the same round: after / before by round.
        b = dict(zip(before["rounds"], before["log_ratios"], strict=True))
        a = dict(zip(after["rounds"], after["log_ratios"], strict=True))
        v = decide_by_round({r: math.exp(x) for r, x in a.items()},
                          {r: math.exp(x) for r, x in b.items()},
                          before["higher_is_better"], 0.03)
        assert v is not None and v.n == 40
        seen[wl] = v.verdict
        if wl != "rr":
            # Looked at after every round, as a report of a shorter run would: never worse or
            # better (the bootstrap interval this replaced called fio "better" after 4 rounds).
            for n in range(2, 41):
                first = {r: x for r, x in a.items() if r <= n}
                w = decide_by_round({r: math.exp(x) for r, x in first.items()},
                                  {r: math.exp(x) for r, x in b.items() if r <= n},
                                  before["higher_is_better"], 0.03)
                assert w is not None and w.verdict not in (Verdict.WORSE, Verdict.BETTER), \
                    (wl, n, w)
    assert seen["rr"] is Verdict.BETTER, seen
    assert all(seen[wl] in (Verdict.EQUIVALENT, Verdict.UNDECIDED)
               for wl in ("compress", "stream", "fio")), seen


POD_ENVS = [
    {"name": "runc-host", "kind": "runc", "network": "host"},
    {"name": "pod-runc-host", "kind": "pod", "network": "host"},
    {"name": "pod-runc", "kind": "pod", "network": "pod"},
    {"name": "pod-runc-service", "kind": "pod", "network": "service"},
]


def test_no_layer_pair_stacks_two_layers_under_one_name() -> None:
    """A pod's Service stacks on the pod network (the pod kind says so): hostNetwork ->
    Service is two layers, left out where the pod-network environment ran (its two single
    layers are there), else named as the two; pod network -> Service says what the Service
    is: DNAT, and SNAT for a client outside the pod network."""
    names = [e["name"] for e in POD_ENVS]
    pairs = {(p.before_env, p.after_env): p for p in single_layer_pairs(POD_ENVS, names)}
    assert set(pairs) == {("runc-host", "pod-runc-host"), ("pod-runc-host", "pod-runc"),
                          ("pod-runc", "pod-runc-service")}
    words = pairs[("pod-runc", "pod-runc-service")].words()
    assert words.startswith("network: pod → service (") and "DNAT" in words and "SNAT" in words
    assert pairs[("pod-runc-host", "pod-runc")].words() == "network: host → pod"
    without = [n for n in names if n != "pod-runc"]
    stacked = {(p.before_env, p.after_env): p for p in single_layer_pairs(POD_ENVS, without)}
    assert "two layers: the pod network" in stacked[("pod-runc-host", "pod-runc-service")].words()
