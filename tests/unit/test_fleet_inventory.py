"""The fleet's hosts from `ansible-inventory --list` (real output of Ansible 2.19 captured in
tests/data/fleet/ with the inventories it read), and the refusals of the command line: a
missing inventory, one Ansible cannot parse, one without hosts, one that names a host twice,
each one line and exit 2 before anything is started or written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import DATA

from isotax.fleet import ansible
from isotax.fleet.inventory import (
    InventoryError,
    duplicate_refusal,
    duplicates,
    host_order,
    parse_inventory_list,
    read_inventory,
)

FLEET = DATA / "fleet"


def _list(name: str) -> dict:  # type: ignore[type-arg]
    return json.loads((FLEET / name).read_text())


def test_ini_hosts_in_inventory_order_with_their_vars() -> None:
    hosts = parse_inventory_list(_list("inventory-ini.list.json"))
    # groups as `all` lists them (lab, then cloud), each host once (alpha is in both)
    assert [h.name for h in hosts] == ["alpha", "beta", "gamma.example.net"]
    alpha, beta, gamma = hosts
    assert (alpha.address, alpha.port, alpha.user) == ("192.0.2.10", 22, "root")
    assert (beta.address, beta.port, beta.user) == ("192.0.2.11", 2222, "")
    assert (gamma.address, gamma.port, gamma.user) == ("gamma.example.net", 22, "admin")
    assert alpha.isotax_dir == "/opt/isotax" and beta.isotax_dir == "/srv/isotax"
    assert beta.vars["isotax_store"] == "postgresql://itx@192.0.2.1/fleet"  # a group var
    assert gamma.vars["ansible_become"] == "true"
    assert beta.endpoint == "192.0.2.11:2222"


def test_yaml_nested_groups() -> None:
    hosts = parse_inventory_list(_list("inventory-yml.list.json"))
    assert [h.name for h in hosts] == ["r1a", "r1b", "r2a"]
    assert hosts[1].port == 2200 and hosts[2].user == "bench"
    assert hosts[2].endpoint == "[2001:db8::5]:22"
    assert all(h.isotax_dir == "/opt/isotax" for h in hosts)


def test_host_order_walks_each_group_once() -> None:
    doc = {"all": {"children": ["a", "b"]}, "a": {"children": ["b"], "hosts": ["x"]},
           "b": {"hosts": ["y", "x"]}, "_meta": {"hostvars": {"z": {}}}}
    assert host_order(doc) == ["x", "y", "z"]


def test_a_bad_port_is_named() -> None:
    with pytest.raises(InventoryError, match="host h: ansible_port 'ssh' is not a port"):
        parse_inventory_list({"all": {"hosts": ["h"]},
                              "_meta": {"hostvars": {"h": {"ansible_port": "ssh"}}}})


def test_the_same_sshd_under_two_names_is_refused() -> None:
    hosts = parse_inventory_list(_list("duplicate-ini.list.json"))
    assert [[h.name for h in g] for g in duplicates(hosts)] == [["web1", "web2"]]
    refusal = duplicate_refusal("dup.ini", hosts)
    assert refusal == ("inventory dup.ini lists the same host twice: web1 and web2 are all "
                       "192.0.2.20:22 (ansible_host:ansible_port); keep one of them: a fleet "
                       "runs one run per host")
    assert duplicate_refusal("ok.ini", parse_inventory_list(_list("inventory-ini.list.json"))) \
        is None


def test_read_inventory_through_ansible(tmp_path: Path) -> None:
    tool = ansible.tool("ansible-inventory")
    assert [h.name for h in read_inventory(FLEET / "inventory.ini", tool)] == \
        ["alpha", "beta", "gamma.example.net"]
    with pytest.raises(InventoryError, match="does not exist"):
        read_inventory(tmp_path / "none.ini", tool)
    bad = tmp_path / "bad.ini"
    bad.write_text("[lab\nalpha ansible_host=192.0.2.1\n")
    with pytest.raises(InventoryError, match=r"cannot be read by Ansible \(.*\); fix it"):
        read_inventory(bad, tool)
    empty = tmp_path / "empty.ini"
    empty.write_text("[lab]\n")
    with pytest.raises(InventoryError, match="has no hosts"):
        read_inventory(empty, tool)


def _fleet_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    plan = tmp_path / "p.toml"
    plan.write_text('name = "p"\n[[environments]]\nname = "native"\nkind = "native"\n'
                    '[[workloads]]\nname = "compress"\n')
    return subprocess.run([sys.executable, "-m", "isotax", "fleet", "run", str(plan),
                           "--results", str(tmp_path / "results"), *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("inventory", "says"), [
    ("duplicate.ini", "lists the same host twice: web1 and web2 are all 192.0.2.20:22"),
    ("missing.ini", "missing.ini does not exist; give an Ansible inventory file"),
])
def test_cli_refuses_in_one_line(tmp_path: Path, inventory: str, says: str) -> None:
    p = _fleet_run(tmp_path, "--inventory", str(FLEET / inventory))
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("isotax: ") and p.stderr.count("\n") == 1, p.stderr
    assert says in p.stderr
    assert not (tmp_path / "results").exists()  # nothing started, nothing written


def test_cli_wants_an_inventory_and_knows_its_fleets(tmp_path: Path) -> None:
    p = _fleet_run(tmp_path)
    assert p.returncode == 2 and "give the hosts with --inventory FILE" in p.stderr
    p = subprocess.run([sys.executable, "-m", "isotax", "fleet", "run", "--resume",
                        "fleet-x", "--results", str(tmp_path)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert f"no fleet fleet-x under {tmp_path / 'fleets'}" in p.stderr
