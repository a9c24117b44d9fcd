"""The versions a run is made with (isotax.host.facts.versions): recorded as run meta when the run
starts, named in its bundle's manifest, shown in the report, and compared by `isotax report`
with the versions it regenerates the report with."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from support import RUNNER_PLAN, GoneEnvironment

from isotax import protocols
from isotax.analysis.report_data import analyze
from isotax.host.facts import versions
from isotax.image.artifacts import ImageArtifacts
from isotax.model import CellKey, CellStatus, Sample
from isotax.plan import parse_plan
from isotax.report import json_report, markdown
from isotax.run.runner import Runner
from isotax.run.schedule import new_run_id
from isotax.store.base import CellOutcome
from isotax.store.bundle import export_bundle
from isotax.store.sqlite import SQLiteStore

PLAN = """
name = "v"
repetitions = 1
[[environments]]
name = "native"
kind = "native"
[[workloads]]
name = "compress"
params = { corpus_mib = 16 }
"""


def _current() -> dict[str, str]:
    return versions.installed(versions.REPORT_PACKAGES)


def _recorded(**changed: str) -> dict[str, Any]:
    """A "versions" run meta as the runner stores it, with some packages' versions changed."""
    rec = versions.collect()
    rec["python_packages"].update(changed)
    return rec


def _store(tmp_path: Path, rec: dict[str, Any] | None) -> SQLiteStore:
    store = SQLiteStore(tmp_path / "src" / "isotax.db")
    store.create_run("r1", "v", PLAN, 1, {"hostname": "h", "cpus": 2})
    params = {"corpus_mib": 16, "level": 2, "seed": 1, "threads": 0}
    for rep in (1, 2):
        store.commit_cell("r1", CellKey("native", "compress", params, rep), "1",
                          CellOutcome(CellStatus.OK, "",
                                      [Sample("throughput", 10.0 + rep, "MB/s")]), rep, rep + 1)
    if rec is not None:
        store.put_run_meta("r1", versions.META_KEY, rec)
    store.set_run_status("r1", "complete", 9)
    return store


def test_the_dependency_closure_is_what_is_installed() -> None:
    closure = versions.dependency_closure()
    for name in ("isotax", "matplotlib", "numpy", "scipy", "pydantic", "packaging", "click"):
        assert closure[name] == metadata.version(name), name
    # Transitive, through extras too: psycopg[binary] brings psycopg-binary.
    assert "pydantic-core" in closure and "psycopg-binary" in closure
    assert list(closure) == sorted(closure)
    assert versions.dependency_closure("no-such-distribution-itx") == {}


def test_host_tools_first_line_from_stdout_or_stderr() -> None:
    tools = versions.host_tools({"sh": ("sh", "-c", "echo 'tool 1.2' >&2; echo more >&2"),
                                 "nope": ("itx-no-such-tool", "--version")})
    assert tools == {"sh": "tool 1.2", "nope": "not installed"}
    assert set(versions.collect()["host_tools"]) == set(versions.HOST_TOOLS)
    assert versions.python_version().startswith(f"{sys.version_info[0]}.{sys.version_info[1]}")


def test_a_run_records_its_versions_beside_its_fingerprint(
        tmp_path: Path, echo_workload: type, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(protocols.ENVIRONMENTS, GoneEnvironment.kind, GoneEnvironment)
    text = RUNNER_PLAN.replace('name = "native2"\nkind = "native"',
                               f'name = "gone"\nkind = "{GoneEnvironment.kind}"')
    plan = parse_plan(text)
    store = SQLiteStore(tmp_path / "isotax.db")
    run_id = new_run_id(plan.name)
    store.create_run(run_id, plan.name, text, plan.seed, {"hostname": "h"})
    runner = Runner(plan, text, store, ImageArtifacts("test", tmp_path / "image"),
                    lambda _: None)
    assert runner.run(run_id) == "refused"
    rec = store.run_meta(run_id)[versions.META_KEY]
    assert rec["python_packages"]["isotax"] == metadata.version("isotax")
    assert rec["python_packages"]["matplotlib"] == metadata.version("matplotlib")
    assert rec["python"].startswith("3.") and set(rec["host_tools"]) == set(versions.HOST_TOOLS)
    # A resumed run keeps what its first start recorded, as it keeps its fingerprint.
    store.put_run_meta(run_id, versions.META_KEY, {**rec, "python": "first start"})
    runner.run(run_id)
    assert store.run_meta(run_id)[versions.META_KEY]["python"] == "first start"
    store.close()


def test_the_bundle_manifest_names_the_versions(tmp_path: Path) -> None:
    rec = _recorded(matplotlib="3.8.4")
    store = _store(tmp_path, rec)
    bundle = export_bundle(store, "r1", tmp_path / "r1.itx.tar.gz")
    with tarfile.open(bundle) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
    assert manifest["versions"] == rec
    assert manifest["versions"]["python_packages"]["matplotlib"] == "3.8.4"
    old = _store(tmp_path / "old", None)  # a run from before versions were recorded
    with tarfile.open(export_bundle(old, "r1", tmp_path / "old.itx.tar.gz")) as tar:
        assert json.loads(tar.extractfile("manifest.json").read())["versions"] is None  # type: ignore[union-attr]


def test_differences_one_line_per_report_package() -> None:
    now = {"isotax": "0.1.0", "matplotlib": "3.9.2", "numpy": "2.0.0", "scipy": "1.14.0",
           "pydantic": "2.8.0"}
    rec = {"python_packages": dict(now)}
    assert versions.report_differences(rec, now) == []
    rec["python_packages"].update(matplotlib="3.8.4", numpy="1.26.4", click="8.0")
    assert versions.report_differences(rec, now) == [
        "the report is regenerated with matplotlib 3.9.2; the run was reported with 3.8.4: "
        "figures may differ in bytes",
        "the report is regenerated with numpy 2.0.0; the run was reported with 1.26.4: "
        "statistics may differ in the last digits"]  # click does not shape the report
    assert len(versions.report_differences(None, now)) == 1
    assert "recorded no package versions" in versions.report_differences(None, now)[0]


def test_the_report_shows_the_versions_and_what_differs(tmp_path: Path) -> None:
    same = _store(tmp_path / "same", _recorded())
    md = markdown.render(analyze(same, "r1"))
    host = md.split("## Host", 1)[1].split("\n## ", 1)[0]
    assert f"matplotlib {metadata.version('matplotlib')}" in host
    assert "the report's packages: isotax" in host and "regenerated with" not in host
    assert "perf (host tool)" in host
    other = _store(tmp_path / "other", _recorded(matplotlib="3.8.4"))
    md = markdown.render(analyze(other, "r1"))
    assert (f"the report is regenerated with matplotlib {metadata.version('matplotlib')}; the "
            "run was reported with 3.8.4: figures may differ in bytes") in md
    assert "the report's packages" not in markdown.render(
        analyze(_store(tmp_path / "old", None), "r1"))
    # results.json carries them too (null for a run that recorded none).
    assert json.loads(json_report.render(analyze(same, "r1")))["versions"] == _recorded()
    assert json.loads(json_report.render(analyze(
        _store(tmp_path / "old2", None), "r1")))["versions"] is None


def _report(target: str, results: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "isotax", "report", target, "--results",
                           str(results), "--out", str(out), "--html"],
                          capture_output=True, text=True, timeout=300, check=False)


def test_cli_report_warns_only_when_versions_differ(tmp_path: Path) -> None:
    old = _recorded(matplotlib="3.8.4")
    store = _store(tmp_path / "a", old)
    bundle = export_bundle(store, "r1", tmp_path / "r1.itx.tar.gz")
    store.close()
    done = _report(str(bundle), tmp_path, tmp_path / "out-bundle")
    assert done.returncode == 0, done.stderr
    warned = [ln for ln in done.stderr.splitlines() if "regenerated with" in ln]
    assert warned == [f"warning: the report is regenerated with matplotlib "
                      f"{_current()['matplotlib']}; the run was reported with 3.8.4: figures "
                      "may differ in bytes"]
    store = _store(tmp_path / "b", _recorded())  # a stored run, the versions here
    store.close()
    done = _report("r1", tmp_path / "b" / "src", tmp_path / "out-same")
    assert done.returncode == 0, done.stderr
    # (The run's own warnings, few repetitions and the like, may be there; none of versions.)
    assert "regenerated with" not in done.stderr and "package versions" not in done.stderr
