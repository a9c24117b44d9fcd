"""Plan validation: every bad plan gets one clear line; the CLI exits 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from isotax.plan import PlanError, load_plan, parse_plan

GOOD = """
name = "t"
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "runc"
kind = "runc"
network = "bridge"
[[workloads]]
name = "compress"
params = { level = 2, threads = [1, 2] }
"""


def test_a_workload_may_appear_twice_with_other_parameters() -> None:
    plan = parse_plan(GOOD + '[[workloads]]\nname = "compress"\nparams = { level = 6 }\n')
    assert [w.name for w in plan.workloads] == ["compress", "compress"]


def test_good_plan_expands_sweeps_over_defaults() -> None:
    plan = parse_plan(GOOD)
    combos = plan.workloads[0].combinations()
    assert [c["threads"] for c in combos] == [1, 2]
    assert all(c["level"] == 2 and c["corpus_mib"] == 64 for c in combos)
    assert plan.repetitions == 3 and plan.baseline == "native"


@pytest.mark.parametrize("name", ["quick", "full", "layers", "contrasts", "kubernetes",
                                  "kubernetes-2node"])
def test_builtin_plans_are_valid(name: str) -> None:
    plan, text = load_plan(name)
    assert plan.name == name and text.strip()
    assert any(e.kind == "native" for e in plan.environments)


BAD = [
    ("name = ", "not valid TOML"),
    (GOOD.replace('kind = "runc"', 'kind = "runq"'), "environments[1] (\"runc\").kind: unknown"),
    (GOOD.replace("level = 2", "levle = 2"), "has no parameter 'levle'"),
    (GOOD.replace("level = 2", 'level = "two"'), "compress.level = 'two' should be int"),
    (GOOD.replace("threads = [1, 2]", "threads = []"), "empty sweep"),
    (GOOD + '[[workloads]]\nname = "stream"\nparams = { variant = "triad" }\n',
     "stream.variant = 'triad' is not one of: star, single"),
    (GOOD.replace("threads = [1, 2]", "threads = [1, -1]"), "compress.threads = -1 is below 0"),
    (GOOD.replace('name = "runc"', 'name = "native"'), "'native' is used twice"),
    (GOOD.replace('network = "bridge"', 'network = "nat"'), "network"),
    (GOOD.replace('name = "t"', 'name = "t"\nrepetitions = 0'), "repetitions"),
    (GOOD.replace('name = "t"', 'name = "t"\nrepetitons = 3'), "repetitons: is not a plan setting"),
    (GOOD.replace('name = "compress"', 'name = "compres"'), "unknown workload 'compres'"),
    (GOOD.replace('name = "native"', 'name = "host"'), "baseline 'native' is not among"),
    (GOOD + '[[workloads]]\nname = "compress"\nparams = { threads = 2, level = 2 }\n',
     "workload 'compress' lists the same parameters twice"),
    ('name = "t"\n[[workloads]]\nname = "compress"', "environments: is required"),
]


@pytest.mark.parametrize(("text", "expected"), BAD)
def test_bad_plan_one_clear_line(text: str, expected: str) -> None:
    with pytest.raises(PlanError) as e:
        parse_plan(text, "p.toml")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("p.toml")
    assert expected in msg


def test_cli_bad_plan_exits_2_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(BAD[1][0])
    p = subprocess.run([sys.executable, "-m", "isotax", "run", str(bad),
                        "--results", str(tmp_path / "r")], capture_output=True, text=True)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown environment kind 'runq'" in lines[0], p.stderr
    assert not (tmp_path / "r").exists()  # a bad plan touches no store


def test_cli_missing_plan_exits_2(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "isotax", "run", str(tmp_path / "nope.toml")],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "not found" in p.stderr


def test_a_plan_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    """A plan saved in Latin-1 (the é of "défaut"): refused at load in one line naming the byte
    and the fix, through the CLI with exit 2 and no store created."""
    bad = tmp_path / "latin1.toml"
    bad.write_bytes('name = "d\u00e9faut"\n'.encode("latin-1"))
    with pytest.raises(PlanError) as e:
        load_plan(str(bad))
    assert str(e.value).startswith(f"{bad}: not UTF-8 text (byte 0xe9 at offset 9)")
    assert "save the plan as UTF-8" in str(e.value)
    p = subprocess.run([sys.executable, "-m", "isotax", "run", str(bad),
                        "--results", str(tmp_path / "r")], capture_output=True, text=True)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "not UTF-8 text" in lines[0], p.stderr
    assert not (tmp_path / "r").exists()


def test_a_plan_that_cannot_be_read_is_one_line(tmp_path: Path) -> None:
    """A directory given as the plan: one line, not a traceback."""
    d = tmp_path / "plan.toml"
    d.mkdir()
    with pytest.raises(PlanError, match=r"plan\.toml"):
        load_plan(str(d))


def test_layers_plan_pairs_environments_by_one_layer() -> None:
    import tomllib

    from isotax.analysis.attribution import single_layer_pairs

    plan, text = load_plan("layers")
    envs = tomllib.loads(text)["environments"]
    pairs = {(p.before_env, p.after_env): p.axis
             for p in single_layer_pairs(envs, [e.name for e in plan.environments])}
    assert pairs[("runc", "runc-host")] == "network"
    assert pairs[("runc-host", "runc-overlay")] == "storage"
    assert pairs[("runc-host", "crun")] == "kind"
    assert pairs[("gvisor", "gvisor-host")] == "network"
    assert pairs[("docker-bridge", "docker-host")] == "network"
    assert pairs[("qemu-untuned", "qemu-tuned")] == "options.profile"
    assert pairs[("qemu-untuned", "microvm")] == "kind"
