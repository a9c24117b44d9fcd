"""Ansible's events -> each host's outcome, on real events of isotax's own playbooks run by
ansible-runner against the tests' namespace hosts (tests/data/fleet/events-*.json, trimmed
to the fields isotax reads): unreachable with ssh's own words, a failed setup with its exit
status and last line of stderr, a run the host refused with isotax's one line, a host lost
while its run measured, and the probe's looks in the polls."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support import DATA

from isotax.fleet import ansible
from isotax.fleet.ansible import (
    CANCELED,
    FAILED,
    OK,
    UNREACHABLE,
    Outcomes,
    failure_reason,
    outcomes,
    unreachable_reason,
)
from isotax.fleet.orchestrate import _look, _waiting_for


def _events(name: str) -> list[dict[str, Any]]:
    return json.loads((DATA / "fleet" / f"events-{name}.json").read_text())


def test_identity_one_host_unreachable() -> None:
    out = outcomes(_events("identity"), ["h1", "h2"])
    assert out["h1"].status == OK and out["h1"].results["identity"]["rc"] == 0
    assert out["h2"].status == UNREACHABLE
    # Ansible said: 'Data could not be sent to remote host "10.214.226.2". Make sure this
    # host can be reached over ssh: ssh: connect to host ...'
    assert out["h2"].reason == "ssh: connect to host 10.214.226.2 port 22: Connection refused"
    assert out["h2"].task == "identity"


def test_install_fresh_and_failed_setup() -> None:
    out = outcomes(_events("install"), ["h1", "h2"])
    assert out["h1"].status == OK and "set up" in out["h1"].results  # installed, not skipped
    assert out["h2"].status == FAILED and out["h2"].task == "set up"
    assert out["h2"].reason == "set up: exit 100: E: Unable to locate package isotax-nope"
    # the temporary directory went on both, the failed one too (the playbook's always)
    assert "remove the temporary directory" in out["h2"].results


def test_a_run_into_sqlite_polled_exported_and_fetched() -> None:
    events = _events("run-sqlite")
    out = outcomes(events, ["h1"])["h1"]
    assert out.status == OK
    assert {"export the run", "fetch the run", "clean up"} <= set(out.results)
    assert "the run did not complete" in out.skipped
    looks = [_look(e["event_data"]["res"]) for e in events if e["event"] == "runner_retry"]
    assert looks and all(x is not None and x["live"] and x["next"] == "wait" for x in looks)
    final = _look(out.results["measure"])
    assert final is not None
    assert (final["live"], final["status"], final["cells"], final["next"]) == \
        (False, "complete", 4, "done")


def test_a_run_the_host_refuses() -> None:
    out = outcomes(_events("run-refused"), ["h1"])["h1"]
    assert out.status == FAILED and out.task == "the run did not complete"
    assert out.reason.startswith("isotax run exited 2: isotax: ")
    assert "is more than this host's memory" in out.reason
    assert "clean up" in out.results


def test_a_host_lost_while_its_run_measures() -> None:
    events = _events("run-unreachable")
    out = outcomes(events, ["h2"])["h2"]
    assert out.status == UNREACHABLE and out.task == "measure"
    assert out.reason == "ssh: connect to host 10.214.226.2 port 22: Connection refused"
    looks = [_look(e["event_data"]["res"]) for e in events if e["event"] == "runner_retry"]
    waiting = [x for x in looks if x and x["waiting"]]
    # (the capture held the host's measuring lock for its first looks, as another run would)
    assert waiting and waiting[0]["status"] == "" and waiting[0]["next"] == "wait"
    assert _waiting_for(waiting[0]["waiting"]) == "another isotax run"
    assert _waiting_for("waiting for run r1 (PID 7) to end: one run measures on a host at a "
                        "time") == "run r1 (PID 7)"
    assert looks[-1] is not None and looks[-1]["cells"] >= 1  # it measured, then was lost


def test_reasons() -> None:
    assert failure_reason("x", "ansible.builtin.fail", {"msg": "its isotax run was ..."}) == \
        "its isotax run was ..."
    assert failure_reason("set up", "ansible.builtin.shell",
                          {"rc": 2, "msg": "non-zero return code", "stderr": "",
                           "stdout": "a\nlast words\n"}) == "set up: exit 2: last words"
    assert failure_reason("copy the checkout", "ansible.builtin.copy",
                          {"msg": "Could not find or access 'x'"}) == \
        "copy the checkout: Could not find or access 'x'"
    assert unreachable_reason({"msg": "Task failed: Failed to connect to the host via ssh: "
                                      "ssh: connect to host a port 22: No route to host"}) == \
        "ssh: connect to host a port 22: No route to host"
    assert unreachable_reason({}) == "no answer"


def test_hosts_the_playbook_never_reached() -> None:
    fold = Outcomes()
    assert fold.result(["h1"])["h1"].status == FAILED
    assert fold.result(["h1"], canceled=True)["h1"].status == CANCELED
    fold.feed({"event": "runner_on_ok", "event_data": {"host": "h1", "task": "t", "res": {}}})
    assert fold.result(["h1"], canceled=True)["h1"].status == CANCELED
    ignored = {"event": "runner_on_failed",
               "event_data": {"host": "h1", "task": "t", "ignore_errors": True, "res": {}}}
    fold.feed(ignored)
    assert fold.result(["h1"])["h1"].status == OK


def test_ansible_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANSIBLE_SSH_ARGS", raising=False)
    env = ansible.environment(tmp_path)
    assert env["PATH"].split(":")[0] == str(ansible.bin_dir())  # the venv's Ansible first
    assert env["ANSIBLE_SSH_CONTROL_PATH_DIR"] == str(tmp_path / "cp")
    assert env["ANSIBLE_LOCAL_TEMP"] == str(tmp_path / "tmp")
    assert "ServerAliveInterval" in env["ANSIBLE_SSH_ARGS"]
    assert env["ANSIBLE_SSH_RETRIES"] == "3"  # a dropped connection is tried again
    monkeypatch.setenv("ANSIBLE_SSH_ARGS", "-o Mine=yes")
    assert "ANSIBLE_SSH_ARGS" not in ansible.environment(tmp_path)  # the user's is kept
    for name in ("identity", "install", "run"):
        assert ansible.playbook(name).is_file()
    assert Path(ansible.tool("ansible-playbook")).parent == ansible.bin_dir()
