"""This host's spreads of paired headline log ratios, from its stored runs, for the verdict
simulation test (tests/unit/test_verdict_simulation.py reads the JSON this writes).

For every environment and workload point of the named runs: each measured repetition's
headline value against the baseline's of the same repetition (round), as log(env/baseline):
the pairs the verdicts use (isotax.analysis.verdicts), in round order (the order they were
measured), one segment per run, so the simulation keeps their autocorrelation and centres
each run on its own mean. Usage, as root:

    .venv/bin/python benchmarks/host_spreads.py RUN [RUN ...] > tests/data/verdicts/spreads.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--results", default="/var/lib/isotax/results", help="results directory")
    ap.add_argument("--baseline", default="native")
    args = ap.parse_args()
    from pathlib import Path

    from isotax.analysis.headline import headline_values
    from isotax.analysis.verdicts import pair_by_round
    from isotax.store.sqlite import open_store

    store = open_store(Path(args.results), create=False)
    # Per environment x point, one segment per run: its pairs in round order (time order).
    segments: dict[tuple[str, str, str], list[list[float]]] = defaultdict(list)
    pairing: dict[str, str] = {}
    for run_id in args.runs:
        run = store.get_run(run_id)
        pairing[run.id] = str(store.run_meta(run.id).get("pairing", "shuffled rounds"))
        values, _, _ = headline_values(store.cells(run.id))
        for (env, wl, pkey), by_rep in values.items():
            base = values.get((args.baseline, wl, pkey))
            if env == args.baseline or not base:
                continue
            d = pair_by_round(by_rep, base)
            if len(d) >= 2:
                segments[(env, wl, pkey)].append(d)
    out = []
    for (env, wl, pkey), segs in sorted(segments.items()):
        d = [x for seg in segs for x in seg]
        if len(d) < 3:
            continue
        # The spread within runs (each run's pairs about their own mean): what one run sees.
        within = [x - statistics.mean(seg) for seg in segs for x in seg]
        dof = sum(len(seg) - 1 for seg in segs)
        out.append({"environment": env, "workload": wl, "params": pkey, "n": len(d),
                    "mean": statistics.mean(d),
                    "sd": math.sqrt(sum(x * x for x in within) / dof),
                    "log_ratios": d, "segments": segs})
    json.dump({"runs": args.runs, "pairing": pairing, "spreads": out}, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
