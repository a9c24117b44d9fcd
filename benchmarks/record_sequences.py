"""Long real pair sequences for the verdicts' error rates (issue 41; the data of
tests/unit/test_verdict_error_rates.py), exported from a stored run of
benchmarks/plans/sequences.toml (or any run with many rounds).

For every environment and workload point of the run: each round's headline value against the
baseline's of the same round, as log(env/baseline), in round order, with when the
environment's cell started (seconds from the run's first measured cell), so a test can see
how far apart a ratio's pairs were and what dependence that left. The run's day and host go
with it: a history must come from another day's sequences. Usage, as root:

    .venv/bin/isotax run benchmarks/plans/sequences.toml
    .venv/bin/python benchmarks/record_sequences.py RUN \\
        > tests/data/verdicts/sequences-$(date +%F).json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run")
    ap.add_argument("--results", default="/var/lib/isotax/results", help="results directory")
    ap.add_argument("--baseline", default="native")
    args = ap.parse_args()
    from isotax.analysis.headline import headline_values
    from isotax.analysis.verdicts import pair_by_round
    from isotax.model import CellStatus
    from isotax.store.sqlite import open_store

    store = open_store(Path(args.results), create=False)
    run = store.get_run(args.run)
    cells = store.cells(run.id)
    values, metric, higher = headline_values(cells)
    started: dict[tuple[str, str, str], dict[int, float]] = defaultdict(dict)
    measured = [c for c in cells if not c.key.warmup and c.status is CellStatus.OK]
    t0 = min(c.started for c in measured)
    for c in measured:
        started[(c.key.environment, c.key.workload, c.key.params_key)][c.key.repetition] = \
            round(c.started - t0, 3)
    out = []
    for (env, wl, pkey), by_rep in sorted(values.items()):
        base = values.get((args.baseline, wl, pkey))
        if env == args.baseline or not base:
            continue
        rounds = [r for r in sorted(by_rep.keys() & base.keys())
                  if by_rep[r] > 0 and base[r] > 0]
        out.append({"environment": env, "workload": wl, "params": pkey,
                    "metric": metric[(wl, pkey)], "higher_is_better": higher[(wl, pkey)],
                    "rounds": rounds, "log_ratios": pair_by_round(by_rep, base),
                    "started_s": [started[(env, wl, pkey)][r] for r in rounds],
                    "baseline_started_s": [started[(args.baseline, wl, pkey)][r]
                                           for r in rounds]})
    day = time.strftime("%Y-%m-%d", time.localtime(t0))
    json.dump({"run": run.id, "plan": run.plan_name, "day": day,
               "host": {k: run.host.get(k) for k in ("hostname", "kernel", "cpu_model", "cpus",
                                                     "memory_mib")},
               "baseline": args.baseline, "sequences": out}, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
