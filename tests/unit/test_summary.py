"""The typed telemetry summary: summaries stored by real runs read back and written as the very
JSON the store holds, older formats read, and the parts each stage adds."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from support import DATA

from isotax.telemetry.summary import (
    GROUPS,
    Counted,
    Link,
    PerfEvents,
    TelemetrySummary,
    Work,
)

STORED = sorted((DATA / "telemetry").glob("summary-*.json"))


@pytest.mark.parametrize("path", STORED, ids=[p.stem for p in STORED])
def test_a_stored_summary_is_written_back_byte_for_byte(path: Path) -> None:
    raw = path.read_text().strip()
    s = TelemetrySummary.from_json(json.loads(raw))
    assert json.dumps(s.to_json()) == raw


def test_stored_summaries_read_as_typed_parts() -> None:
    vm = TelemetrySummary.from_json(json.loads(
        (DATA / "telemetry" / "summary-qemu-rr-udp.json").read_text()))
    assert vm.kind_class == "vm" and set(vm.groups) == set(GROUPS)
    assert vm.guest is not None and vm.guest.cpu_busy_peak is not None
    assert vm.inside == Counted(vm.guest.busy, "the guest's own /proc/stat")
    assert vm.work is not None and vm.work.in_flight == 1
    assert isinstance(vm.perf, PerfEvents)
    redis = TelemetrySummary.from_json(json.loads(
        (DATA / "telemetry" / "summary-runc-redis.json").read_text()))
    assert redis.loadgen is not None and redis.guest is None
    assert all(isinstance(ln, Link) for ln in redis.links.values())
    assert redis.threads[0].cpu_s >= redis.threads[-1].cpu_s  # most CPU first


@pytest.mark.parametrize("path", sorted((DATA / "limiter").glob("*.json"))
                         + sorted((DATA / "cost").glob("*.json")),
                         ids=lambda p: p.stem)
def test_older_summaries_are_read(path: Path) -> None:
    """Summaries stored before programs and link speeds were recorded: read with None for
    them, and written back equal but for the links' speed_mbps and virtual (None)."""
    d = json.loads(path.read_text())
    d = d.get("summary", d)
    s = TelemetrySummary.from_json(d)
    out = s.to_json()
    assert {k: v for k, v in out.items() if k != "links"} == \
        {k: v for k, v in d.items() if k != "links"}
    for name, link in d["links"].items():
        assert out["links"][name] == {"speed_mbps": None, "virtual": None, **link}
    assert (s.programs is None) == ("programs" not in d)


def test_stages_add_their_parts_and_the_summary_stays_frozen() -> None:
    d = json.loads((DATA / "telemetry" / "summary-runc-redis.json").read_text())
    sampled = TelemetrySummary.from_json(
        {k: v for k, v in d.items()
         if k not in ("kind_class", "inside", "loadgen", "perf", "work")})
    assert sampled.kind_class == "" and sampled.work is None
    assert "work" not in sampled.to_json() and "inside" not in sampled.to_json()
    done = dataclasses.replace(sampled, work=Work(2.0, "request"))
    assert done.to_json()["work"] == {"amount": 2.0, "unit": "request"}  # no in_flight: none
    with pytest.raises(dataclasses.FrozenInstanceError):
        done.work = None  # type: ignore[misc]
    with pytest.raises(TypeError):
        done.groups["inside"] = done.groups["other"]  # type: ignore[index]
    assert done.group_cpu_s("nonesuch") == 0.0
