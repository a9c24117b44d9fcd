"""A load generator reached only over SSH (issue 18): a namespace host with a real sshd
(nshosts.py) runs every network client of a plan (rr, throughput, redis) against servers in
native and in a bridged runc container, through one shared SSH connection; the results, the
run's record and the report say which load generator they used; its clients' CPU comes from
the load generator; a lost connection fails a cell with its reason and the next command
connects again; nothing is left behind here or there."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import ours, requires_root_and

from isotax.loadgen.ssh import CONTROL_DIR, SshLoadGen, leaked_connections
from isotax.model import SanityError
from isotax.plan import LoadGenSettings
from isotax.run.leaks import leaked_iptables_rules
from isotax.run.recovery import recover
from isotax.store.sqlite import SQLiteStore

from .nshosts import SshHost, ssh_hosts, why_not

pytestmark = [pytest.mark.integration, requires_root_and("debootstrap", "runc"),
              pytest.mark.skipif(why_not() is not None, reason=why_not() or "")]

ISOTAX = [sys.executable, "-m", "isotax"]
PLAN = """
name = "remote-lg"
seed = 18
repetitions = 1
warmups = 0
parity = "flag"

[loadgen]
host = "{url}"
key_file = "{key}"
known_hosts = "{known}"
install = false

[[environments]]
name = "native"
kind = "native"

[[environments]]
name = "runc-bridge"
kind = "runc"
network = "bridge"

[[workloads]]
name = "rr"
params = {{ seconds = 2 }}

[[workloads]]
name = "throughput"
params = {{ seconds = 2 }}

[[workloads]]
name = "redis"
params = {{ requests = 20000, connections = 4 }}
"""


@pytest.fixture(scope="module")
def host() -> Iterator[SshHost]:
    with ssh_hosts(1) as (h,):
        yield h


def _settings(h: SshHost) -> LoadGenSettings:
    return LoadGenSettings(host=h.url(), key_file=str(h.key_file),
                           known_hosts=str(h.known_hosts), install=False)


def test_a_plan_runs_its_network_clients_on_the_ssh_host(host: SshHost, image: object,
                                                          tmp_path: Path) -> None:
    plan = tmp_path / "remote.toml"
    plan.write_text(PLAN.format(url=host.url(), key=host.key_file, known=host.known_hosts))
    results = tmp_path / "results"
    p = subprocess.run([*ISOTAX, "run", "--results", str(results), str(plan)],
                       capture_output=True, text=True, timeout=1500)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    store = SQLiteStore(results / "isotax.db")
    try:
        (run,) = store.list_runs()
        assert run.status == "complete"
        lg = store.run_meta(run.id)["loadgen"]
        assert lg["kind"] == "ssh" and lg["client_address"] == host.address
        assert lg["host_address"] == host.host_side and lg["uplink"] == host.link
        assert lg["same_machine"] is True  # a namespace of this machine, and it says so
        assert float(lg["rtt_floor_ms"]) > 0 and lg["mtu"] == "1500"
        cells = store.cells(run.id)
        failed = [(c.key.environment, c.key.workload, c.reason) for c in cells
                  if c.status != "ok"]
        assert not failed
        by = {(c.key.environment, c.key.workload) for c in cells}
        assert by == {(e, w) for e in ("native", "runc-bridge")
                      for w in ("rr", "throughput", "redis")}
        for c in cells:
            # Every result names the SSH load generator on its path, bridged ones the DNAT.
            paths = {s.labels["path"] for s in c.samples if "path" in s.labels}
            assert paths, (c.key, [s.metric for s in c.samples])
            for path in paths:
                assert path.startswith(f"loadgen root@{host.address} over SSH"), path
                assert ("host DNAT" in path) == (c.key.environment == "runc-bridge"), path
            tool = c.samples[0].labels.get("tool", "")
            if c.key.workload in ("throughput", "redis"):
                assert f"client: root@{host.address} over SSH" in tool
        # The clients' CPU was counted on the load generator, by their own times.
        tele = store.telemetry(run.id)
        counted = [t.loadgen for t in tele.values() if t.loadgen is not None]
        assert counted and all(t.cpus == int(lg["cpus"]) for t in counted)
        assert all("over SSH" in t.source for t in counted)
        assert sum(float(t.cpu_s) for t in counted) > 0
    finally:
        store.close()
    report = (results / run.id / "report.md").read_text()
    assert "## Load generator" in report and f"root@{host.address} over SSH" in report
    assert "this same machine" in report
    # The port mappings on the uplink and the SSH connection are gone.
    assert not [x for x in leaked_iptables_rules() if host.link in x]
    assert not ours("itx-ssh-")


def test_a_lost_connection_fails_the_command_with_its_reason(
        image: object) -> None:
    with ssh_hosts(1) as (h,):
        lg = SshLoadGen(_settings(h), {})
        try:
            lg.up()
            assert lg.exec(["true"], 10).returncode == 0
            assert lg.cpu_group is not None and lg.cpu_group.records
            h.stop_sshd(sessions=True)
            with pytest.raises(SanityError, match="over SSH"):
                lg.exec(["true"], 10)
        finally:
            lg.close()
    assert not list(CONTROL_DIR.glob(f"itx-ssh-{lg.tag}*"))
    assert not ours(f"itx-ssh-{lg.tag}")


def test_an_unreachable_load_generator_refuses_the_run_in_one_line(host: SshHost,
                                                                   tmp_path: Path) -> None:
    plan = tmp_path / "bad.toml"
    text = PLAN.format(url=host.url(), key=host.key_file, known=tmp_path / "empty")
    (tmp_path / "empty").write_text("")  # the host's key is unknown: strict checking refuses
    plan.write_text(text)
    p = subprocess.run([*ISOTAX, "run", "--results", str(tmp_path / "r"), "--no-report",
                        str(plan)], capture_output=True, text=True, timeout=300)
    assert p.returncode != 0
    line = [ln for ln in p.stderr.splitlines() if "load generator" in ln]
    assert line and "known_hosts" in line[-1], p.stderr[-2000:]
    assert not ours("itx-ssh-")


def test_a_killed_runs_ssh_connection_is_recovered(host: SshHost) -> None:
    """A run killed while its load generator is connected leaves the SSH master (its own
    session) and its control socket; recovery knows them as the dead run's and removes both."""
    script = (
        "import os\n"
        "from isotax.host import owners\n"
        "from isotax.loadgen.ssh import SshLoadGen\n"
        "from isotax.plan import LoadGenSettings\n"
        "owners.claim('test-ssh-crash')\n"
        f"lg = SshLoadGen(LoadGenSettings(host={host.url()!r}, key_file={str(host.key_file)!r},"
        f" known_hosts={str(host.known_hosts)!r}, install=False), {{}})\n"
        "lg.up()\n"
        "print(lg.tag, lg._master.pid, flush=True)\n"
        "os._exit(9)  # as if killed: nothing is closed\n")
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120)
    tag, pid = p.stdout.split()
    name = f"itx-ssh-{tag}"

    def left() -> list[str]:
        return [str(x) for x in leaked_connections() if name in x]

    assert any("SSH connection" in x for x in left()), left()
    assert (CONTROL_DIR / name).exists() and Path(f"/proc/{pid}").exists()
    rec = recover(find=leaked_connections)
    assert not left(), (left(), rec)
    assert not list(CONTROL_DIR.glob(f"{name}*"))
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()
