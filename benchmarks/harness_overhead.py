"""Harness overhead: the compress workload through isotax natively against the same xz command
run by hand, as a ratio from one invocation. Run as root: .venv/bin/python benchmarks/...

The hand-run command is what a user would type: `xz -2 -T<n> -c corpus > /dev/null`, timed
around the process. Hand runs happen before and after the isotax run, so drift hits both.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLAN = """
name = "harness"
repetitions = {reps}
warmups = 1
[[environments]]
name = "native"
kind = "native"
[[workloads]]
name = "compress"
params = {{ corpus_mib = {mib}, threads = {threads} }}
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mib", type=int, default=32)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    from isotax import protocols
    from isotax.analysis.report_data import analyze
    from isotax.image.build import ensure_image
    from isotax.store.sqlite import SQLiteStore

    threads = os.cpu_count() or 1
    image = ensure_image(protocols.image_recipe())
    # Not itx-*: an isotax run started meanwhile takes unowned itx-* entries for leftovers.
    corpus = Path(f"/dev/shm/isotax-bench-corpus-{os.getpid()}")
    with corpus.open("wb") as f:
        subprocess.run([str(image.rootfs / "opt/isotax/bin/itx-corpus"), "--bytes",
                        f"{args.mib}M", "--seed", "1"], stdout=f, check=True)
    size = corpus.stat().st_size

    def by_hand() -> float:
        t0 = time.perf_counter()
        subprocess.run(["xz", "-2", f"-T{threads}", "-c", str(corpus)],
                       stdout=subprocess.DEVNULL, check=True)
        return size / (time.perf_counter() - t0) / 1e6

    try:
        by_hand()  # warm-up, like isotax's
        hand = [by_hand() for _ in range(args.reps)]
        with tempfile.TemporaryDirectory(prefix="isotax-bench-") as tmp:
            plan = Path(tmp) / "plan.toml"
            plan.write_text(PLAN.format(reps=args.reps, mib=args.mib, threads=threads))
            subprocess.run([sys.executable, "-m", "isotax", "run", str(plan), "--results",
                            f"{tmp}/r", "--no-report"], check=True, capture_output=True)
            store = SQLiteStore(Path(tmp) / "r" / "isotax.db")
            data = analyze(store, store.list_runs()[-1].id)
            row = next(r for r in data.rows if r.metric == "throughput")
            via = list(data.cells[(row, "native")].values)
        hand += [by_hand() for _ in range(args.reps)]
    finally:
        corpus.unlink(missing_ok=True)
    h, v = statistics.mean(hand), statistics.mean(via)
    print(f"corpus {args.mib} MiB, xz -2 -T{threads}")
    print(f"by hand : {h:8.2f} MB/s  (n={len(hand)}, sd {statistics.stdev(hand):.2f})")
    print(f"isotax  : {v:8.2f} MB/s  (n={len(via)}, sd {statistics.stdev(via):.2f})")
    print(f"ratio isotax/by hand: {v / h:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
