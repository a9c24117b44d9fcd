"""The guest room's small plan, ratios side by side: each environment's ratio to native (with
its 95% interval and verdict) in every run given, one column a run, for the closing notes.

    .venv/bin/python tests/guests/ratios.py HOST/results.json GUEST1/results.json ...

The first run is the reference column (this host); a row is an environment, workload point
and metric that any run has. Baseline rows print native's mean instead of a ratio."""

from __future__ import annotations

import json
import sys
from pathlib import Path

Key = tuple[str, str, str, str]


def rows(path: Path) -> tuple[str, dict[Key, dict]]:
    data = json.loads(path.read_text())
    host = data["host"]
    label = f"{host.get('distro', '?')}, cgroup {host.get('cgroup_mode', '?')} ({path.parent.name})"
    return label, {(r["environment"], r["workload"], r["params"], r["metric"]): r
                   for r in data["results"]}


def cell(r: dict | None) -> str:
    if r is None:
        return "—"
    if r["ratio"] is None:
        return f"{r['mean']:.4g} {r['unit']}"
    lo, hi = r["ratio_ci_low"], r["ratio_ci_high"]
    span = f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else ""
    return f"{r['ratio']:.3f}{span} {r['verdict']}"


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: ratios.py HOST/results.json GUEST/results.json ...", file=sys.stderr)
        return 2
    runs = [rows(Path(a)) for a in argv]
    keys: list[Key] = []
    for _, by in runs:
        keys += [k for k in by if k not in keys]
    print("| environment | workload | metric | " + " | ".join(lbl for lbl, _ in runs) + " |")
    print("|---" * (3 + len(runs)) + "|")
    for k in sorted(keys, key=lambda k: (k[0] != "native", k[0], k[1], k[3])):
        env, workload, _, metric = k
        print(f"| {env} | {workload} | {metric} | "
              + " | ".join(cell(by.get(k)) for _, by in runs) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
