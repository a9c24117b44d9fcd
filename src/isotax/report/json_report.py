"""JSON: the whole report, versioned (model.FORMAT_VERSION), values included. The document
goes through report.results_model, whose models generate its published JSON Schema."""

from __future__ import annotations

import json
from dataclasses import asdict

from isotax.analysis.report_data import ReportData
from isotax.model import FORMAT_VERSION
from isotax.report import claims_section, phases_section, results_model, warmups_section
from isotax.report.decisions import verdicts_value
from isotax.report.table import result_rows


def render(d: ReportData) -> str:
    doc = {
        "format_version": FORMAT_VERSION,
        "run": {k: v for k, v in asdict(d.run).items() if k not in ("host", "plan_toml")},
        "host": dict(d.run.host),
        "versions": d.meta.raw.get("versions"),  # as recorded (results.json keeps it whole)
        "plan_toml": d.run.plan_toml,
        "baseline": d.baseline,
        "environments": [
            {"name": e.name, "kind": e.kind, "available": e.available, "reason": e.reason,
             "emulated": d.emulated(e.name), "describe": e.describe.lines(),
             "facts": e.describe.facts.to_stored(),
             "tools": dict(e.tools), "milestones": dict(e.milestones)}
            for e in d.environments
        ],
        "results": result_rows(d),
        "layers": [
            {"axis": lay.axis, "before": lay.before, "after": lay.after,
             "before_environment": lay.before_env, "after_environment": lay.after_env,
             "workload": row.workload, "params": row.params_key, "metric": row.metric,
             "ratio": r.ratio, "ci_low": r.ends[0], "ci_high": r.ends[1],
             "verdict": r.verdict.value, "pairs": r.n, "margin": r.margin}
            for (lay, row), r in d.layer_ratios.items()
        ],
        "failures": [
            {"environment": c.key.environment, "workload": c.key.workload,
             "params": c.key.params_key, "repetition": c.key.repetition,
             "warmup": c.key.warmup, "reason": c.reason}
            for c in d.failures
        ],
        "environment_cpu": [
            {"environment": env, "workload": wl, "params": pkey, "n": c.summary.n,
             "mean_s": c.summary.mean, "sd_s": c.summary.sd, "by_program_mean_s": c.by_program}
            for (env, wl, pkey), c in d.env_cpu.items()
        ],
        # Per result: CPU-s per unit of work (in the environment, hidden on the host, the
        # load generator's) and the suspected limiter with its evidence (isotax.analysis.explain).
        "explained": [
            {"environment": env, "workload": wl, "params": pkey, "watched_runs": ex.repetitions,
             "cost_per_unit": None if ex.cost is None else {
                 "unit": ex.cost.unit, "inside_cpu_s": ex.cost.inside,
                 "hidden_cpu_s": ex.cost.hidden, "total_cpu_s": ex.cost.total,
                 "total_sd_cpu_s": ex.cost.total_sd, "loadgen_cpu_s": ex.cost.loadgen},
             "limiter": {"kind": ex.limiter.limiter.value, "words": ex.limiter.words,
                         "evidence": list(ex.limiter.evidence)}}
            for (env, wl, pkey), ex in d.explained.items()
        ],
        "outliers": [
            {"environment": env, "workload": r.workload, "params": r.params_key,
             "metric": r.metric, "repetition": rep, "value": v, "modified_z": z}
            for r, env, rep, v, z in d.outliers
        ],
        "noise_floor": [
            {"aa_environment": d.aa_env, "workload": r.workload, "params": r.params_key,
             "metric": r.metric, "floor": f}
            for r, f in d.noise_floor.items()
        ],
        "not_applicable": [
            *({"environment": env, "workload": wl, "params": pkey, "reason": why}
              for (env, wl, pkey), why in d.not_applicable.items()),
            *({"environment": env, "workload": wl, "params": pkey, "metric": metric,
               "reason": why}
              for (env, wl, pkey, metric), why in d.not_measured.items()),
        ],
        # Every headline ratio's verdict (worse/better/equivalent/undecided) with its 95%
        # confidence sequence, margin, pairs and why undecided, and the counts; how the added
        # rounds ended (plan [verdicts]), null for a run without them.
        "verdicts": verdicts_value(d),
        "sequential": d.meta.raw.get("sequential"),
        # Each warm-up's headline value against its point's measured runs, and whether it
        # differed (isotax.analysis.warmups).
        "warmups": warmups_section.json_value(d),
        # Where the run's wall time went, by phase, against isotax's goal of at most 5%
        # outside the workloads (isotax.analysis.phases); null for a run that did not measure it.
        "phases": phases_section.json_value(d),
        # Latency CDFs pooled over each point's repetitions: [[µs, cumulative fraction], ...]
        # (isotax.parsers.distributions), the data of the report's latency distribution figures.
        "latency_cdfs": [
            {"environment": env, "workload": wl, "params": pkey, "metric": metric,
             "label": label, "runs": d.cdf_runs[key][env], "cdf_us": cdf}
            for key, by_env in d.latency_cdfs.items() for env, cdf in by_env.items()
            for wl, pkey, metric, label in (key,)
        ],
        "warnings": d.warnings,
        "claims": [v.to_json() for v in claims_section.verdicts(d)],
    }
    # Through the models: a key here that they lack (or the reverse) fails here, in every test
    # that renders a report, rather than leaving the published schema behind the output.
    return json.dumps(results_model.document(doc), indent=2, sort_keys=False) + "\n"
