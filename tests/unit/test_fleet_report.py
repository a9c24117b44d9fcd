"""isotax fleet report's reports and command: the Markdown tables (hosts side by side, who
differs beyond the margin), the HTML with its figures and well-formed, fleet.json, and the command's
files, summary and one-line refusals (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

from click.testing import CliRunner
from support import self_contained

from isotax.analysis.fleet import Fleet, to_json
from isotax.cli.fleet_report import report
from isotax.report import fleet_html, fleet_md

from .test_fleet_analysis import PARAMS, build, fleet_store, put_run

# Two points of compress, so two headline metrics and two figures.
POINTS = ({**PARAMS, "threads": 1}, {**PARAMS, "threads": 2})


def _fleet(tmp_path: Path) -> Fleet:
    return build(fleet_store(tmp_path, POINTS),
                 state={"hosts": {"h1": {}, "h2": {}, "h3": {},
                                  "h4": {"status": "failed", "reason": "<ssh> unreachable"}}})


class _Wellformed(HTMLParser):
    """Every element closed in order (void elements aside); counts the tags."""

    VOID = frozenset({"meta", "br", "img", "hr", "link", "input", "wbr"})

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.count: dict[str, int] = {}
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.count[tag] = self.count.get(tag, 0) + 1
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.count[tag] = self.count.get(tag, 0) + 1

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:]}")
        else:
            self.stack.pop()


def test_markdown_puts_hosts_side_by_side(tmp_path: Path) -> None:
    md = fleet_md.render(_fleet(tmp_path))
    assert md.startswith("# isotax fleet report: f1\n")
    lines = md.splitlines()
    header = next(x for x in lines if x.startswith("| workload point"))
    assert header == ("| workload point | metric | h1 (reference) | h2 | h3 | "
                      "differs beyond the margin |")
    runc = lines[lines.index("### runc") + 4]
    assert runc.startswith("| compress threads=1 | throughput ↑ | 0.900× [")
    assert "0.700× [" in runc and "**≠** | h3 (0.778× h1) |" in runc
    crun = lines[lines.index("### crun") + 4]
    assert crun.endswith("| equivalent |") and "≠" not in crun
    # The summary: runc has 4 metrics, all 4 differ on h3; crun none.
    assert "| runc | 3 | 4 | 4 | h3 (4) |" in md and "| crun | 3 | 4 | 0 | none |" in md
    assert "| h2 | CPU model: EPYC 7302 vs EPYC 9354 |" in md
    assert "| h2 | kernel: 6.1.0 vs 6.6.0 |" in md
    assert "## Hosts that failed or did not finish" in md
    assert "| h4 | - | failed | - | <ssh> unreachable |" in md


def test_html_has_the_figures_and_is_well_formed(tmp_path: Path) -> None:
    page = fleet_html.render(_fleet(tmp_path))
    self_contained(page)
    parser = _Wellformed()
    parser.feed(page)
    parser.close()
    assert parser.errors == [] and parser.stack == []
    assert parser.count["svg"] == 2 and parser.count["figure"] == 2  # one per headline point
    assert page.count("≠") >= 3  # h3's runc in both figures, and the legend
    for section in ("Summary", "Figures", "Hosts", "Isolation tax per host",
                    "Fingerprint facts that differ", "Hosts that failed or did not finish"):
        assert f">{section}</h2>" in page
    assert "&lt;ssh&gt; unreachable" in page and "<ssh>" not in page
    assert "h3 (0.778× h1)" in page and "<b>≠</b>" in page


def test_json_round_trips(tmp_path: Path) -> None:
    doc = json.loads(json.dumps(to_json(_fleet(tmp_path))))
    assert {"format_version", "fleet_format_version", "fleet", "reference", "baseline",
            "rule", "hosts", "plans", "environments", "rows"} <= set(doc)
    assert [h["compared"] for h in doc["hosts"]] == [True, True, True, False]
    assert doc["hosts"][3]["status"] == "failed" and doc["hosts"][3]["run_id"] is None
    assert len(doc["rows"]) == 8


def test_command_writes_the_reports_and_a_summary(tmp_path: Path) -> None:
    fleet_store(tmp_path, POINTS).close()
    (tmp_path / "fleets").mkdir()
    (tmp_path / "fleets" / "f1.json").write_text(json.dumps(
        {"hosts": {"h1": {}, "h2": {}, "h3": {},
                   "h4": {"run_id": None, "status": "failed", "reason": "unreachable"}}}))
    r = CliRunner().invoke(report, ["f1", "--results", str(tmp_path)])
    assert r.exit_code == 0, r.output
    where = tmp_path / "fleets" / "f1"
    assert sorted(p.name for p in where.iterdir()) == ["fleet.html", "fleet.json", "fleet.md"]
    out = r.stdout
    assert "runc: 3 host(s), 4 of 4 metric(s) differ beyond the margin (h3: 4)" in out
    assert "crun: 3 host(s), 0 of 4 metric(s) differ beyond the margin" in out
    assert "host h4:" in r.output and "unreachable" in r.output
    assert out.strip().splitlines()[-1] == f"HTML fleet report: {where / 'fleet.html'}"
    assert json.loads((where / "fleet.json").read_text())["reference"] == "h1"
    # Another reference, elsewhere.
    r = CliRunner().invoke(report, ["f1", "--results", str(tmp_path), "--reference", "h3",
                                    "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    assert "crun: 3 host(s), 0 of 4" in r.stdout and "runc: 3 host(s), 4 of 4" in r.stdout
    assert "| h1 | h2 | h3 (reference) |" in (tmp_path / "o" / "fleet.md").read_text()


def test_command_puts_any_runs_side_by_side(tmp_path: Path) -> None:
    store = fleet_store(tmp_path)
    put_run(store, "x1", "lab", 100.0, {"runc": 0.6, "crun": 0.95}, {}, fleet=None)
    store.close()
    r = CliRunner().invoke(report, ["--runs", "r1,x1", "--results", str(tmp_path),
                                    "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    assert "| h1 (reference) | lab |" in (tmp_path / "o" / "fleet.md").read_text()
    assert "runc: 2 host(s), 2 of 2 metric(s) differ beyond the margin (lab: 2)" in r.stdout


def test_command_refusals_are_one_line_and_exit_2(tmp_path: Path) -> None:
    store = fleet_store(tmp_path)
    put_run(store, "p2", "h9", 100.0, {"runc": 0.9}, {}, fleet="f2",
            plan="name = \"other\"\n")
    put_run(store, "p1", "h8", 100.0, {"runc": 0.9}, {}, fleet="f2")
    store.close()
    cases = {
        ("nope",): "fleet 'nope' has no runs in the store",
        ("f1", "--reference", "h7"): "--reference 'h7' is not a host",
        ("f2",): "ran different plans",
        ("--runs", "r1,zz"): "run 'zz' is not in",
        ("--runs", "r1"): "two or more run ids",
        (): "give a FLEET_ID",
        ("../x",): "is not a name",
    }
    for args, words in cases.items():
        r = CliRunner().invoke(report, [*args, "--results", str(tmp_path)])
        assert r.exit_code == 2, (args, r.output)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], (args, lines)
    assert "fleets there: f1, f2" in CliRunner().invoke(
        report, ["nope", "--results", str(tmp_path)]).stderr
    assert not (tmp_path / "fleets").exists()
    r = CliRunner().invoke(report, ["f2", "--force", "--results", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "## Plans differ" in (tmp_path / "fleets" / "f2" / "fleet.md").read_text()


def test_the_command_is_on_the_fleet_group(tmp_path: Path) -> None:
    """`isotax fleet report` as a user types it: its help, and an unknown fleet's one line."""
    cli = [sys.executable, "-m", "isotax", "fleet", "report"]
    done = subprocess.run([*cli, "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "--reference HOST" in done.stdout
    fleet_store(tmp_path).close()
    done = subprocess.run([*cli, "nope", "--results", str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "fleet 'nope' has no runs" in done.stderr and "--runs" in done.stderr
