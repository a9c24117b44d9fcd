"""The fleet's state file: a whole round trip, written atomically, ids in their forms, and
one-line errors for a missing or damaged file."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from isotax.fleet.state import (
    FleetState,
    HostState,
    StateError,
    load,
    new_fleet_id,
    new_run_id,
    safe_name,
    save,
    state_path,
)


def _state() -> FleetState:
    s = FleetState("fleet-20261124-101010-quick-ab12", "quick", "name = 'quick'\n",
                   "/etc/ansible/hosts", "postgresql://itx:***@db/fleet", "/var/lib/isotax/results",
                   created=1.5)
    s.hosts["h1"] = HostState("h1", "10.0.0.1", 22, "20261124-101010-quick-h1-0a0a", "complete",
                              machine={"machine_id": "m", "boot_id": "b"},
                              timings={"install_s": 95.2, "run_s": 2011.0}, started=2.0,
                              ended=3.0)
    s.hosts["h2"] = HostState("h2", "10.0.0.2", 2222, "20261124-101010-quick-h2-0b0b",
                              "unreachable", "ssh: connect to host 10.0.0.2 port 2222: "
                              "Connection refused")
    return s


def test_round_trip(tmp_path: Path) -> None:
    s = _state()
    path = state_path(tmp_path, s.id)
    save(s, path)
    assert path == tmp_path / "fleets" / f"{s.id}.json"
    again = load(tmp_path, s.id)
    assert again == s
    assert list(again.hosts) == ["h1", "h2"]  # inventory order kept
    assert [h.name for h in again.unfinished()] == ["h2"]
    assert json.loads(path.read_text())["version"] == 1
    assert os.listdir(path.parent) == [path.name]  # no temporary file left


def test_save_replaces_whole_files(tmp_path: Path) -> None:
    s = _state()
    path = state_path(tmp_path, s.id)
    save(s, path)
    inode = path.stat().st_ino
    s.hosts["h2"].status = "complete"
    save(s, path)
    assert path.stat().st_ino != inode  # renamed over, never rewritten in place
    assert load(tmp_path, s.id).hosts["h2"].status == "complete"


def test_ids() -> None:
    assert re.fullmatch(r"fleet-\d{8}-\d{6}-quick-[0-9a-f]{4}", new_fleet_id("quick"))
    assert re.fullmatch(r"\d{8}-\d{6}-quick-bench1\.lab-[0-9a-f]{4}",
                        new_run_id("quick", "bench1.lab"))
    assert safe_name("root@10.0.0.1:22/x") == "root-10.0.0.1-22-x"
    assert safe_name("///") == "host"


def test_missing_and_damaged_state(tmp_path: Path) -> None:
    s = _state()
    save(s, state_path(tmp_path, s.id))
    with pytest.raises(StateError, match=f"no fleet fleet-nope under .*fleets there: {s.id}"):
        load(tmp_path, "fleet-nope")
    state_path(tmp_path, "fleet-bad").write_text("{not json")
    with pytest.raises(StateError, match="cannot be read"):
        load(tmp_path, "fleet-bad")
    state_path(tmp_path, "fleet-other").write_text('{"id": "x"}')
    with pytest.raises(StateError, match="not one isotax wrote"):
        load(tmp_path, "fleet-other")
    newer = {**s.to_json(), "version": 99}
    state_path(tmp_path, "fleet-newer").write_text(json.dumps(newer))
    with pytest.raises(StateError, match="newer isotax"):
        load(tmp_path, "fleet-newer")
