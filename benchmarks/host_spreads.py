"""This host's spreads of paired headline log ratios, from its stored runs, for the verdict
simulation test (tests/unit/test_verdict_simulation.py reads the JSON this writes).

For every environment and workload point of the named runs: each measured repetition's
headline value against the baseline's of the same repetition (round), as log(env/baseline):
the pairs the verdicts use (isotax.analysis.verdicts). Usage, as root:

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
    args = ap.parse_args()
    from pathlib import Path

    from isotax.model import CellStatus
    from isotax.protocols import headline_metric
    from isotax.store.sqlite import open_store

    store = open_store(Path(args.results), create=False)
    pairs: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for run_id in args.runs:
        run = store.get_run(run_id)
        values: dict[tuple[str, str, str, int], float] = {}
        seen: dict[tuple[str, str], list[str]] = defaultdict(list)
        cells = [c for c in store.cells(run.id) if not c.key.warmup and c.status is CellStatus.OK]
        for c in cells:
            for s in c.samples:
                if s.metric not in seen[(c.key.workload, c.key.params_key)]:
                    seen[(c.key.workload, c.key.params_key)].append(s.metric)
        for c in cells:
            want = headline_metric(c.key.workload, seen[(c.key.workload, c.key.params_key)])
            for s in c.samples:
                if s.metric == want:
                    values[(c.key.environment, c.key.workload, c.key.params_key,
                            c.key.repetition)] = s.value
        for (env, wl, pkey, rep), v in values.items():
            base = values.get(("native", wl, pkey, rep))
            if env != "native" and base and v > 0 and base > 0:
                pairs[(env, wl, pkey)].append(math.log(v / base))
    out = [{"environment": env, "workload": wl, "params": pkey, "n": len(d),
            "mean": statistics.mean(d), "sd": statistics.stdev(d), "log_ratios": d}
           for (env, wl, pkey), d in sorted(pairs.items()) if len(d) >= 3]
    json.dump({"runs": args.runs, "spreads": out}, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
