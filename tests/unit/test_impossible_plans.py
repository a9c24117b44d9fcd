"""Plans this host cannot run are refused at load, through the real CLI: exit status 2, one
line on stderr naming the place, what it asks and the fix, and no store made (issue 17).

The corpus is tests/data/impossible-plans/, one plan per file; its first line says what the
refusal must contain (`# expect: ...`). The plans are impossible on any plausible host (100
TiB, 1000 vCPUs, a kind that cannot do it) or made so by the test: `# rlimit-nofile: N` runs
the CLI with that hard RLIMIT_NOFILE, which an unprivileged process may lower. No root
needed: each is refused before `isotax run` asks for root."""

from __future__ import annotations

import dataclasses
import resource
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner
from support import DATA

from isotax import protocols
from isotax.cli import main
from isotax.host.facts import numa
from isotax.plan import BUILTIN_PLANS, PlanError, load_plan, parse_plan
from isotax.run import feasibility

CORPUS = DATA / "impossible-plans"
PLANS = sorted(CORPUS.glob("*.toml"))
GiB = 1 << 30


def _header(path: Path, key: str) -> str | None:
    """The value of a `# key: value` comment line of a corpus plan."""
    for line in path.read_text().splitlines():
        if line.startswith(f"# {key}: "):
            return line.removeprefix(f"# {key}: ")
    return None


def _skip_where_possible(path: Path) -> None:
    """A NUMA node the plan asks for that this host happens to have makes it possible here."""
    raw = tomllib.loads(path.read_text())
    have = numa.nodes()
    for e in raw.get("environments", []):
        if e.get("numa_node") is not None and e["numa_node"] in have \
                and protocols.environments()[e["kind"]].supports_numa:
            pytest.skip(f"this host has NUMA node {e['numa_node']}")


def test_the_corpus_has_the_issues_examples_and_more() -> None:
    names = {p.stem for p in PLANS}
    assert len(names) >= 30
    for example in ("compress-corpus-100tb", "redis-10-million-connections",
                    "density-100-million-instances", "vm-memory-100tb", "vcpus-1000",
                    "numa-node-7", "qemu-accel-warp", "runc-unknown-option",
                    "gvisor-platform-hyperdrive", "qemu-host-network", "microvm-host-network",
                    "vm9p-host-network"):
        assert example in names
    assert all(_header(p, "expect") for p in PLANS), "every plan says what it expects"


@pytest.mark.parametrize("path", [p for p in PLANS if _header(p, "rlimit-nofile") is None],
                         ids=lambda p: p.stem)
def test_an_impossible_plan_is_refused_at_load(path: Path, tmp_path: Path) -> None:
    _skip_where_possible(path)
    _refused_in_process(path)  # never a real run, should the CLI let one through
    results = tmp_path / "results"
    r = CliRunner().invoke(main, ["run", str(path), "--results", str(results)])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    expect = _header(path, "expect")
    assert expect and expect in lines[0], f"{lines[0]!r} lacks {expect!r}"
    assert lines[0].startswith(f"isotax: {path}: ") or "baseline" in lines[0]
    assert not results.exists()  # no store, nothing written


def _refused_in_process(path: Path, host: feasibility.HostFacts | None = None) -> None:
    with pytest.raises(PlanError):
        plan, _ = load_plan(str(path))
        feasibility.check(plan, str(path), host)


def _lower_nofile(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


@pytest.mark.parametrize("path", [p for p in PLANS if _header(p, "rlimit-nofile") is not None],
                         ids=lambda p: p.stem)
def test_more_connections_than_open_files_is_refused(path: Path, tmp_path: Path) -> None:
    """The real command (a process of its own), its hard limit on open files lowered."""
    limit = int(_header(path, "rlimit-nofile") or 0)
    _refused_in_process(path, dataclasses.replace(feasibility.HostFacts.here(),
                                                  open_files=limit))
    results = tmp_path / "results"
    p = subprocess.run([sys.executable, "-m", "isotax", "run", str(path), "--results",
                        str(results)], capture_output=True, text=True,
                       preexec_fn=lambda: _lower_nofile(limit))
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert (_header(path, "expect") or "?") in lines[0]
    assert f"more than this host allows, {limit} (RLIMIT_NOFILE hard limit {limit}" in lines[0]
    assert not results.exists()


def test_the_console_script_refuses_too(tmp_path: Path) -> None:
    """.venv/bin/isotax itself, not only the click command."""
    script = Path(sys.executable).parent / "isotax"
    if not script.exists():
        pytest.skip(f"no console script at {script}")
    path = CORPUS / "vm9p-host-network.toml"
    p = subprocess.run([str(script), "run", str(path), "--results", str(tmp_path / "r")],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        f"isotax: {path}: environments[1] (\"vm\").network: kind 'vm9p' cannot do network = "
        "'host'; use 'bridge' or 'none'"]
    assert not (tmp_path / "r").exists()


# -- what every kind declares, checked for all of them -------------------------------------

PLAN = 'name = "p"\n[[environments]]\nname = "native"\nkind = "native"\n{env}\n' \
       '[[workloads]]\nname = "compress"\n'


def _entry(kind: str, **more: str) -> str:
    lines = [f'[[environments]]\nname = "x"\nkind = "{kind}"']
    lines += [f"{k} = {v}" for k, v in more.items()]
    return "\n".join(lines)


def _network_it_can(kind: str) -> str:
    return f'"{protocols.environments()[kind].networks[0]}"'


@pytest.mark.parametrize("kind", sorted(protocols.environment_kinds()))
def test_every_kind_refuses_an_option_it_does_not_declare(kind: str) -> None:
    text = PLAN.format(env=_entry(kind, network=_network_it_can(kind),
                                  options="{ no_such_option = 1 }"))
    with pytest.raises(PlanError) as e:
        parse_plan(text, "p.toml")
    declared = [o.name for o in protocols.environments()[kind].options]
    assert str(e.value).startswith('p.toml: environments[1] ("x").options.no_such_option: ')
    assert (", ".join(declared) if declared else "takes none") in str(e.value)


@pytest.mark.parametrize("kind", sorted(protocols.environment_kinds()))
def test_every_kind_refuses_a_network_it_cannot_do(kind: str) -> None:
    cls = protocols.environments()[kind]
    for net in protocols.NETWORKS:
        text = PLAN.format(env=_entry(kind, network=f'"{net}"'))
        if net in cls.networks:
            parse_plan(text)
            continue
        with pytest.raises(PlanError, match=f"network = '{net}'"):
            parse_plan(text)


@pytest.mark.parametrize("kind", sorted(protocols.environment_kinds()))
def test_every_declared_default_fits_its_own_spec(kind: str) -> None:
    """A kind's options, each at its default (where it has one), make a plan that loads."""
    cls = protocols.environments()[kind]
    for o in cls.options:
        assert o.default is None or o.problem(o.default) is None, (kind, o.name)
    defaults = {o.name: o.default for o in cls.options if o.default is not None}
    inline = ", ".join(f"{k} = {_toml(v)}" for k, v in defaults.items())
    parse_plan(PLAN.format(env=_entry(kind, network=_network_it_can(kind),
                                      storage=f'"{cls.storages[0]}"',
                                      options=f"{{ {inline} }}")))


def _toml(v: object) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    return f'"{v}"' if isinstance(v, str) else str(v)


def test_on_off_options_take_toml_booleans_and_words() -> None:
    ok = 'options = { pin = true, hugepages = "off", vhost = "auto", quiet = "on" }'
    parse_plan(PLAN.format(env=_entry("qemu", network='"bridge"') + "\n" + ok))


# -- the built-in plans fit the development machine -----------------------------------------

DEV = feasibility.HostFacts(memory_bytes=24 * GiB, cpus=2, numa_nodes={0: [0, 1]},
                            open_files=20000, open_files_words="RLIMIT_NOFILE 20000",
                            disk_bytes=252 * GiB)


@pytest.mark.parametrize("name", BUILTIN_PLANS)
def test_builtin_plans_fit_a_2_core_24_gib_one_node_host(name: str) -> None:
    plan, _ = load_plan(name)
    assert feasibility.problems(plan, name, DEV) == []


def test_a_smaller_host_refuses_the_full_plan_with_the_fix() -> None:
    plan, _ = load_plan("full")
    small = feasibility.HostFacts(memory_bytes=8 * GiB, cpus=2, numa_nodes={0: [0, 1]},
                                  open_files=1024, disk_bytes=20 * GiB)
    found = feasibility.problems(plan, "built-in plan 'full'", small)
    assert found[0] == ("built-in plan 'full': environments[5] (\"qemu\").memory_mib: 16384 MiB "
                        "(16.0 GiB) is more than this host's memory, 8.0 GiB (MemTotal); lower "
                        "memory_mib to 8192 at most")
    assert any("workloads[1] (\"linpack\").params.n: n = 40000 needs 11.9 GiB" in f
               for f in found)
    assert any("params: numjobs = 64, size_mib = 512 needs 32.0 GiB of disk" in f for f in found)
    with pytest.raises(PlanError, match=r"\(and \d+ more problem\(s\)\)$"):
        feasibility.check(plan, "full", small)


def test_numa_nodes_without_cpus_and_absent_ones() -> None:
    plan = parse_plan(PLAN.format(env=_entry("runc", numa_node="1")))
    two = feasibility.HostFacts(memory_bytes=GiB * 8, cpus=2, numa_nodes={0: [0, 1], 1: []},
                                open_files=1024)
    assert feasibility.problems(plan, "p", two) == [
        'p: environments[1] ("x").numa_node: NUMA node 1 has no CPUs (memory only) to run on; '
        "use a node with CPUs"]
    one = feasibility.HostFacts(memory_bytes=GiB * 8, cpus=2, numa_nodes={0: [0, 1]},
                                open_files=1024)
    assert "its nodes: 0" in feasibility.problems(plan, "p", one)[0]


def test_a_sweep_refuses_only_its_impossible_points() -> None:
    text = PLAN.format(env=_entry("qemu", network='"bridge"', memory_mib="2048")) \
        + "params = { corpus_mib = [16, 4096, 8192] }\n"
    found = feasibility.problems(parse_plan(text), "p", DEV)
    assert [f.split(": ")[2].split(" needs")[0] for f in found] == [
        "corpus_mib = 4096", "corpus_mib = 8192"]
