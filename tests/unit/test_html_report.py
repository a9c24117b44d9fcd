"""The self-contained HTML report, generated from stored runs: nothing fetched from outside,
every host and plan string escaped, every section rendered."""

from __future__ import annotations

import json
import re
from html import escape
from pathlib import Path

from support import DATA, HOSTILE_CPU, HOSTILE_HOST, hostile_store, self_contained

from isotax.analysis.report_data import analyze
from isotax.host.facts.description import EnvironmentDescription
from isotax.host.facts.fingerprint import fingerprint
from isotax.model import CellKey, CellStatus, Sample
from isotax.report import html, markdown
from isotax.store.base import CellOutcome, EnvRecord
from isotax.store.sqlite import SQLiteStore
from isotax.telemetry.envcpu import METRIC as ENV_CPU
from isotax.telemetry.summary import TelemetrySummary


def test_hostile_strings_are_escaped(tmp_path: Path) -> None:
    store, run_id = hostile_store(tmp_path)
    page = html.render(analyze(store, run_id))
    self_contained(page)
    assert HOSTILE_HOST not in page and "&lt;script&gt;alert(&#x27;host&#x27;)" in page
    # A terminal colour code is dropped, another control character shows as U+FFFD.
    assert "\x1b" not in page and "\x07" not in page and "&lt;/script&gt;\ufffd" in page
    assert HOSTILE_CPU not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "&lt;/pre&gt;&lt;script&gt;alert(&#x27;plan&#x27;)" in page
    assert ">Results</h2>" in page and "<svg" in page  # results rendered, with a figure


RICH_PLAN = """
name = "rich"
repetitions = 5
aa = true
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
[[workloads]]
name = "compress"
params = { corpus_mib = 16 }
[[workloads]]
name = "rr"
"""


def _rich_store(tmp_path: Path) -> tuple[SQLiteStore, str]:
    """A stored run with every section the Markdown report can have: the host's whole
    fingerprint (with a hostile name), telemetry (verdicts, cost), the environments' own
    CPU, a layer (bridge → host), an A/A noise floor, an outlier, a failure, a point that
    does not apply, verdicts with added rounds, startup and density."""
    host = {**fingerprint(DATA / "host" / "this-host"),
            "hostname": HOSTILE_HOST}
    store = SQLiteStore(tmp_path / "isotax.db")
    store.create_run("r", "rich", RICH_PLAN, 1, host)
    envs = {"native": 1.0, "native-aa": 1.01, "runc": 0.9, "runc-host": 0.97}
    for env in envs:
        store.put_environment(EnvRecord("r", env, env.split("-")[0], True, "",
                                        EnvironmentDescription.from_stored(
                                            {"network": "bridge"} if env == "runc" else {}),
                                        {"xz-utils": "5.4.1"}, {"ready": 0.1}))
    cost = DATA / "cost"
    params = {"corpus_mib": 16, "level": 2}
    for rep in range(1, 6):
        for env, k in envs.items():
            summary = TelemetrySummary.from_json(json.loads(
                (cost / f"{'native' if env.startswith('native') else 'runc'}-compress-1.json")
                .read_text()))
            value = (100.0 + rep % 3) * k * (0.6 if (env, rep) == ("native", 5) else 1.0)
            samples = [Sample("throughput", value, "MB/s"),
                       Sample(ENV_CPU, 0.5 * rep, "s", False,
                              {"by_program": {"runc": 0.2, "xz": 0.3}})]
            store.commit_cell("r", CellKey(env, "compress", params, rep), "1",
                              CellOutcome(CellStatus.OK, "", samples, (summary, {"t": [0.5]})),
                              rep, rep + 1)
            store.commit_cell("r", CellKey(env, "startup", {"starts": 3}, rep), "1",
                              CellOutcome(CellStatus.OK, "",
                                          [Sample("ready_ms", 20.0 * k, "ms", False),
                               Sample("ready_p95_ms", 30.0 * k, "ms", False)]), 0, 1)
        store.commit_cell("r", CellKey("runc-host", "rr", {"proto": "tcp"}, rep), "1",
                          CellOutcome(CellStatus.NOT_APPLICABLE, "no network to measure"), 0, 1)
    for env in envs:
        store.commit_cell("r", CellKey(env, "density", {"max_instances": 2}, 1), "1",
                          CellOutcome(CellStatus.OK, "",
                                      [Sample("idle_instance_mib", 1.5, "MiB", False)]), 0, 1)
    store.commit_cell("r", CellKey("runc", "compress", params, 6), "1",
                      CellOutcome(CellStatus.FAILED, "SanityError: <b>xz</b> output differs"), 0, 1)
    store.put_run_meta("r", "sequential", {
        "settings": {}, "repetitions": 5, "max_repetitions": 8, "ended": "time budget reached",
        "rounds": 2, "added_cells": 8, "spent_s": 30.0, "decided": 0, "total": 1,
        "counts": {}, "ratios": []})
    store.set_run_status("r", "complete", 9)
    return store, "r"


def test_every_section_of_the_markdown_is_in_the_html(tmp_path: Path) -> None:
    """report.md's sections (## and ###) are report.html's, each ## one in the contents; the
    warnings' "see Failures/Outliers/Verdicts" link to theirs."""
    for store, run_id in (hostile_store(tmp_path), _rich_store(tmp_path / "rich")):
        d = analyze(store, run_id)
        md, page = markdown.render(d), html.render(d)
        self_contained(page)
        sections = [ln[3:] for ln in md.splitlines() if ln.startswith("## ")]
        subsections = [ln[4:] for ln in md.splitlines() if ln.startswith("### ")]
        assert "Results" in sections and "Plan (exact)" in sections
        for title in sections:
            shown = escape(title.replace("\\|", "|"))
            assert re.search(f"<h2 id=[^>]+>{re.escape(shown)}</h2>", page), title
            assert re.search(f"<a href=#[^>]+>{re.escape(shown)}</a>", page), title
        for title in subsections:
            assert f">{escape(title.replace(chr(92) + '|', '|'))}</h3>" in page, title
        ids = re.findall(r"<h[23] id=([^ >]+)>", page)
        assert len(ids) == len(set(ids))  # every anchor leads to one place
        for href in re.findall(r"<a (?:class=small )?href=#([^ >]+)>", page):
            assert href in ids, href
    # The rich run has every section the Markdown can have.
    assert {"Host", "Environments", "Results", "Every result: is it real, what it cost, "
            "what limited it", "Verdicts", "Attribution to layers", "CPU of the "
            "environments' own host processes", "Tool versions", "Not applicable", "Outliers",
            "Failures", "Warnings", "Plan (exact)"} <= set(sections)
    assert {"Noise floor (A/A: native against native-aa)", "Startup phases",
            "Memory footprint and density", "compress"} <= {t.split(" (")[0] if
                                                            t.startswith(("Startup", "Memory"))
                                                            else t for t in subsections}
    # The same content: the markdown's tables' cells, and its markup as markup, not text.
    assert "<td>runc → runc-host</td>" in page and "<td>undecided</td>" in page
    assert "SanityError: &lt;b&gt;xz&lt;/b&gt; output differs" in page
    assert "Added rounds ended: time budget reached." in page
    assert "<details><summary>Evidence" in page
    assert HOSTILE_HOST not in page and "<td>SMT</td>" in page
    for name in ("Failures", "Outliers", "Verdicts"):
        assert f"see <a href=#{name.lower()}>{name}</a>" in page, name


def test_a_warning_said_of_several_environments_is_one_block_the_rest_whole() -> None:
    """One noisy host's alike warnings (outliers in six environments) fold into one block
    that names the environments, the most important kinds first, nothing left out."""
    from isotax.analysis.report_warnings import ReportWarning
    said = [ReportWarning.OUTLIERS.say(env=e, count=3, metrics="xz throughput")
            for e in ("runc", "crun")]
    parity = ReportWarning.PARITY.say("qemu", problem="qemu has 2 CPUs")
    blocks = html.warning_blocks([*said, parity, "a plain line"], {"Outliers": "outliers"})
    assert len(blocks) == 3 and "qemu has 2 CPUs" in blocks[0] and "a plain line" in blocks[2]
    assert "<summary><b>outlying values</b> in 2 environments: runc, crun" in blocks[1]
    assert blocks[1].count("<p>") == 2 and "see <a href=#outliers>Outliers</a>" in blocks[1]


def test_the_markdown_folds_the_same_warnings_as_the_html(tmp_path: Path) -> None:
    from isotax.analysis.report_warnings import ReportWarning
    store, run_id = _rich_store(tmp_path)
    d = analyze(store, run_id)
    d.warnings = [*(ReportWarning.HIGH_VARIANCE.say(env=e, count=2, workload="compress",
                                                    metric="throughput", cv=0.08)
                    for e in ("runc", "runc-host")),
                  ReportWarning.PARITY.say("runc", problem="runc has 1 CPU")]
    md = markdown.render(d)
    part = md[md.index("## Warnings"):]
    assert part.index("- unequal resources: runc has 1 CPU") < part.index("<details>")
    assert "<details><summary><b>high variance</b> in 2 environments: runc, runc-host" \
           "</summary>" in part
    assert part.count("- runc") == 2  # each environment's words, whole, under the fold
