"""Where the variance of one workload point comes from, on this host: the variance components
that decide how isotax should pair, order and size its cells (issue 28, item 1).

One point (default: the quick plan's compress, level=2 threads=0 corpus_mib=8) in native and
one other environment (default runc on the host's network), both started from the workload
image through isotax's own registries, the way the runner starts, prepares, pauses, resumes
and watches them (isotax.run.runner, isotax.telemetry.observe). Phases, each a share of the
time budget (--minutes):

  back-to-back  k runs in a row in one environment, the other paused: the spread within a
                cell (sd of log values, and the adjacent spread sd(log x[i+1]/x[i])/sqrt 2)
                and the series' autocorrelation, with its time scale;
  alternating   native, env, native, env, ...: each pair's log(env/native), with two
                factors drawn per pair in balanced random blocks: the other environment
                paused during a cell (as the runner does) or left running, and a second run
                right after each cell's first (first/second: caches cold after a resume);
                also the pairs whose halves lie ~--gap seconds apart (a native cell and a
                later env cell, the gap filled by the other cells): between rounds;
  telemetry     back-to-back pairs in one environment, telemetry.observe on for one run and
                off for the other in random order: log(on/off);
  length        alternating pairs at half, the default and double the point's length knob
                (compress: corpus_mib; rr: seconds): the pair spread times sqrt(seconds per
                pair), the spread of one second of budget, to choose the cell length
                (Kalibera and Jones 2013: the level and length that give the least variance
                per unit of cost).

Every spread is of natural-log values (sd of log x is about the CV); every interval is 95%:
chi-square for a standard deviation (an approximate degrees of freedom for the adjacent spread),
t for a mean, Fisher's z for an autocorrelation. Intervals assume independent values, which
the autocorrelation rows say how far to trust.

Run as root (it starts containers), one measuring process on the host at a time (it takes
isotax's measuring lock unless --beside):

    .venv/bin/python benchmarks/variance_components.py [--minutes 10] [--env runc]
        [--workload compress] [--param corpus_mib=8 ...] [--json OUT]

Everything it starts (instances, their itx-* scratch and cgroups, the load generator for a
network workload) is stopped and removed at the end, on an error and on Ctrl-C (the results so
far are still printed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import interleave
from variance_parts import (
    CONFIDENCE,
    Bench,
    Component,
    Run,
    acf_rows,
    adjacent_row,
    adjacent_spread,
    balanced_blocks,
    lag_for_gap,
    log_values,
    mean_interval,
    mean_row,
    pair_log_ratios,
    param_words,
    per_second_row,
    sd_log_row,
    sd_row,
)

LENGTH_KNOBS = {"compress": "corpus_mib", "rr": "seconds", "throughput": "seconds",
                "linpack": "n", "stream": "n", "randomaccess": "n"}


def lengths_of(base: int) -> list[int]:
    """Half, the point's own and double its length knob."""
    return sorted({max(1, base // 2), base, base * 2})


# --------------------------------------------------------------------------- phases

# Shares of the time left when the measuring starts (setup and teardown outside them).
PHASES = (("back-to-back", 0.25), ("alternating", 0.30), ("telemetry", 0.15),
          ("length", 0.25), ("interleave", 0.30))
DEFAULT_PHASES = ("back-to-back", "alternating", "telemetry", "length")
RESERVE = 0.05  # left at the end for the last unit's overrun and the teardown


def run_phases(b: Bench, rng: random.Random, envs: tuple[str, str]) -> None:
    point = b.params()
    knob = b.args.length_param or LENGTH_KNOBS.get(b.cls.name, "")
    lengths = (lengths_of(int(point[knob])) if knob and knob in point
               and "length" in b.args.phases else [])
    for name in envs:
        b.prepare(name, point)
    for ln in lengths:
        if ln != point[knob]:
            for name in envs:
                b.prepare(name, {**point, knob: ln})
    start_left = b.budget.left() * (1 - RESERVE)
    if start_left <= 0:
        b.log("no time left after the setup: give more --minutes")
        return
    t_phase = time.monotonic()
    chosen = [(name, share) for name, share in PHASES if name in b.args.phases]
    total = sum(share for _, share in chosen)
    ends: dict[str, float] = {}
    for name, share in chosen:
        t_phase += share / total * start_left
        ends[name] = t_phase

    def until(name: str) -> Callable[[], bool]:
        return lambda: time.monotonic() < ends[name]

    if "back-to-back" in ends:
        _back_to_back(b, rng, envs, point, ends["back-to-back"])
    if "alternating" in ends:
        _alternating(b, rng, envs, point, until("alternating"))
    if "telemetry" in ends:
        _telemetry(b, rng, envs, point, ends["telemetry"])
    if lengths and "length" in ends:
        _length(b, rng, envs, point, knob, lengths, until("length"))
    if "interleave" in ends:
        b.log(f"phase interleave ({b.args.cell_runs} runs per cell)")
        interleave.run_interleave(b, rng, envs, b.args.cell_runs, until("interleave"))


def _back_to_back(b: Bench, rng: random.Random, envs: tuple[str, str],
                  point: dict[str, Any], end: float) -> None:
    """Each environment's series, in random order, the other paused."""
    b.log("phase back-to-back")
    order = list(envs)
    rng.shuffle(order)
    half = (end - time.monotonic()) / 2
    for name in order:
        stop_at = time.monotonic() + half
        i = 0
        while time.monotonic() < stop_at:
            b.measure("back-to-back", name, point, index=i)
            i += 1


def _alternating(b: Bench, rng: random.Random, envs: tuple[str, str],
                 point: dict[str, Any], go: Callable[[], bool]) -> None:
    """Native then env, per pair the two factors (paused, second run)."""
    native, other = envs
    b.log("phase alternating")
    factors = balanced_blocks([(p, c) for p in (True, False) for c in (True, False)], 10_000,
                              rng)
    pair = 0
    while go():
        paused, second = factors[pair]
        for name in (native, other):
            first = b.measure("alternating", name, point, others_paused=paused, pair=pair,
                              position="first", second=second)
            if first is not None and second:
                b.measure("alternating", name, point, others_paused=paused, pair=pair,
                          position="second", second=second)
        pair += 1


def _telemetry(b: Bench, rng: random.Random, envs: tuple[str, str],
               point: dict[str, Any], end: float) -> None:
    """Telemetry on/off: back-to-back pairs in random order, native for the first half of the
    phase, env for the second (one switch: no pair starts cold after a resume but the first)."""
    native, other = envs
    b.log("phase telemetry")
    halfway = time.monotonic() + (end - time.monotonic()) / 2
    unit = 0
    for name, stop_at in ((native, halfway), (other, end)):
        while time.monotonic() < stop_at:
            first_on = rng.random() < 0.5
            for on in (first_on, not first_on):
                b.measure("telemetry", name, point, telemetry=on, unit=unit)
            unit += 1


def _length(b: Bench, rng: random.Random, envs: tuple[str, str], point: dict[str, Any],
            knob: str, lengths: list[int], go: Callable[[], bool]) -> None:
    """Alternating pairs at each length, in shuffled blocks."""
    b.log(f"phase length ({knob} {', '.join(map(str, lengths))})")
    sizes = balanced_blocks(lengths, 10_000, rng)
    pair = 0
    while go():
        params = {**point, knob: sizes[pair]}
        for name in envs:
            b.measure("length", name, params, pair=pair, length=sizes[pair])
        pair += 1


# --------------------------------------------------------------------------- analysis


def _tagged(tag: str, value: Any) -> Callable[[Run], bool]:
    """Whether a run's tag holds value (is, for booleans: a tag stored as 1 is not True)."""
    if isinstance(value, bool):
        return lambda r: r.tags[tag] is value
    return lambda r: bool(r.tags[tag] == value)


def _pairs(runs: Sequence[Run], phase: str, native: str, other: str,
           keep: Callable[[Run], bool] = lambda r: True) -> list[tuple[Run, Run]]:
    """(native run, env run) of each pair of a phase, where both halves exist."""
    by: dict[int, dict[str, Run]] = {}
    for r in runs:
        if r.phase == phase and r.tags.get("position", "first") == "first" and keep(r):
            by.setdefault(r.tags["pair"], {})[r.env] = r
    return [(d[native], d[other]) for _, d in sorted(by.items())
            if native in d and other in d]


def analyse(b: Bench, native: str, other: str) -> list[Component]:
    runs = b.runs
    rows: list[Component] = []

    # Within a cell: back-to-back.
    b2b: dict[str, list[float]] = {}
    for name in (native, other):
        series = [r for r in runs if r.phase == "back-to-back" and r.env == name]
        vals = b2b[name] = [r.value for r in series]
        g = "within a cell (back to back)"
        rows.append(sd_log_row(g, f"{name}: sd of log values", vals))
        rows.append(adjacent_row(g, f"{name}: adjacent spread", vals,
                                 "sd(log x[i+1]/x[i])/sqrt 2"))
        if len(vals) >= 3:
            rows += acf_rows(g, name, log_values(vals), [r.t_run for r in series])

    # Between adjacent cells.
    pairs = _pairs(runs, "alternating", native, other)
    lr = pair_log_ratios([e.value for _, e in pairs], [n.value for n, _ in pairs])
    g = "between adjacent cells"
    gaps = [e.t_run - n.t_run for n, e in pairs]
    gap_note = f"halves {statistics.median(gaps):.1f} s apart (median)" if gaps else ""
    within = [adjacent_spread(v) for v in b2b.values() if len(v) >= 3]
    alone = (f"; {100 * math.hypot(*within):.2f}% expected from the within-cell adjacent "
             "spreads alone" if len(within) == 2 else "")
    rows.append(sd_row(g, f"pair log({other}/native): sd", lr, gap_note + "; the runner's "
                       "pairing, mixed over the pause and second-run factors" + alone))
    rows.append(mean_row(g, f"pair log({other}/native): mean (the tax)", lr))
    for paused in (True, False):
        sub = _pairs(runs, "alternating", native, other, _tagged("others_paused", paused))
        x = pair_log_ratios([e.value for _, e in sub], [n.value for n, _ in sub])
        word = "other paused (the runner's way)" if paused else "other left running"
        rows.append(sd_row(g, f"pair sd, {word}", x))
    if len(lr) >= 3:
        rows += acf_rows(g, "pair log ratio series", lr, [n.t_run for n, _ in pairs])

    # Between rounds: native of pair i with env of pair i + L, ~gap seconds later.
    g = "between rounds (halves apart)"
    if len(pairs) >= 4:
        times = [n.t_run for n, _ in pairs]
        lag = lag_for_gap(times, b.args.gap, max(3, len(pairs) // 3))
        far = [(pairs[i][0], pairs[i + lag][1]) for i in range(len(pairs) - lag)]
        x = pair_log_ratios([e.value for _, e in far], [n.value for n, _ in far])
        fgaps = [e.t_run - n.t_run for n, e in far]
        note = (f"env {lag} pair(s) after native: halves {statistics.median(fgaps):.0f} s "
                f"apart (median; asked {b.args.gap:.0f} s)")
        if statistics.median(fgaps) < b.args.gap / 2:
            note += "; the run was too short for the gap asked: give more --minutes"
        rows.append(sd_row(g, f"pair log({other}/native) at a gap: sd", x, note))
    else:
        rows.append(Component(g, "pair sd at a gap", "sd", len(pairs), math.nan,
                              note="too few alternating pairs"))

    # isotax's own part.
    g = "isotax's own part"
    for name in (native, other):
        tel = [r for r in runs if r.phase == "telemetry" and r.env == name]
        units: dict[int, dict[bool, float]] = {}
        for r in tel:
            units.setdefault(r.tags["unit"], {})[r.tags["telemetry"]] = r.value
        x = [math.log(u[True] / u[False]) for u in units.values() if len(u) == 2]
        rows.append(mean_row(g, f"{name}: telemetry on/off, mean log ratio", x,
                             "observe.observed around the run or not, back to back"))
        rows.append(sd_row(g, f"{name}: telemetry on/off, sd of log ratio", x,
                           "compare sqrt 2 x the adjacent spread"))
    for name in (native, other):
        for paused in (True, False):
            firsts = {r.tags["pair"]: r for r in runs if r.phase == "alternating"
                      and r.env == name and r.tags["position"] == "first"
                      and r.tags["others_paused"] is paused}
            seconds = [r for r in runs if r.phase == "alternating" and r.env == name
                       and r.tags["position"] == "second" and r.tags["others_paused"] is paused]
            x = [math.log(firsts[s.tags["pair"]].value / s.value) for s in seconds
                 if s.tags["pair"] in firsts]
            word = "after a switch, other paused" if paused else "after a switch, no pause"
            note = ("the resume: the runner pauses the other" if paused and name == other
                    else "native's pause/resume is a no-op" if name == native and paused
                    else "control")
            rows.append(mean_row(g, f"{name}: first/second run, {word}", x, note))
    # Pause between cells vs not: the env's first-run values, paused pairs against not.
    a = [r.value for r in runs if r.phase == "alternating" and r.env == other
         and r.tags["position"] == "first" and r.tags["others_paused"]]
    c = [r.value for r in runs if r.phase == "alternating" and r.env == other
         and r.tags["position"] == "first" and not r.tags["others_paused"]]
    rows.append(_welch_row(g, f"{other}: pause/resume vs not, mean log difference", a, c))

    # Cell length.
    knob = b.args.length_param or LENGTH_KNOBS.get(b.cls.name, "")
    lens = sorted({r.tags["length"] for r in runs if r.phase == "length"})
    g = "cell length"
    for ln in lens:
        sub = _pairs(runs, "length", native, other, _tagged("length", ln))
        x = pair_log_ratios([e.value for _, e in sub], [n.value for n, _ in sub])
        cost = [(n.t_end - n.t_start) + (e.t_end - e.t_start) for n, e in sub]
        secs = statistics.fmean(cost) if cost else math.nan
        row = sd_row(g, f"{knob}={ln}: pair sd", x, f"{secs:.1f} s a pair (both cells, "
                     "with their pause, resume and telemetry)")
        rows.append(row)
        rows.append(per_second_row(g, f"{knob}={ln}: pair sd x sqrt(s a pair)", row, secs))
    if not lens:
        rows.append(Component(g, "cell length", "note", 0, math.nan,
                              note=f"no length knob known for {b.cls.name}: --length-param"))

    # The load generator.
    g = "load generator"
    if not b.cls.needs_loadgen:
        rows.append(Component(g, "sharing the cores", "note", 0, math.nan,
                              note=f"{b.cls.name} needs no load generator: nothing shares "
                              "the cores; measure a network point with --workload rr "
                              "--param proto=tcp --param seconds=1"))
    else:
        m, lo, hi = mean_interval(b.telemetry_seconds)
        rows.append(Component(g, "clients' share of the host CPU", "mean",
                              len(b.telemetry_seconds), m, lo, hi,
                              "CPU the local load generator's clients took during each "
                              "watched run, of all the host's CPUs"))
    return rows


def _welch_row(group: str, name: str, a: Sequence[float], c: Sequence[float]) -> Component:
    """mean log a - mean log c with Welch's t interval."""
    from scipy import stats as sps

    la, lc = log_values(a), log_values(c)
    if len(la) < 2 or len(lc) < 2:
        return Component(group, name, "mean", len(la) + len(lc), math.nan)
    d = statistics.fmean(la) - statistics.fmean(lc)
    va, vc = statistics.variance(la) / len(la), statistics.variance(lc) / len(lc)
    se = math.sqrt(va + vc)
    if se == 0:
        return Component(group, name, "mean", len(la) + len(lc), d, d, d)
    df = (va + vc) ** 2 / (va ** 2 / (len(la) - 1) + vc ** 2 / (len(lc) - 1))
    half = float(sps.t.ppf((1 + CONFIDENCE) / 2, df)) * se
    return Component(group, name, "mean", len(la) + len(lc), d, d - half, d + half,
                     "unpaired (Welch): first runs of the env in paused pairs vs not")


def table(rows: Sequence[Component]) -> str:
    out = ["| component | estimate | 95% interval | n | note |", "|---|---|---|---|---|"]
    for r in rows:
        est, interval, n = r.cells()
        out.append(f"| {r.group}: {r.name} | {est} | {interval} | {n} | {r.note} |")
    return "\n".join(out)


# ------------------------------------------------------------------------------ main


def _loadavg() -> str:
    """The host's 1-minute load average: what else ran (other tenants, other work here)."""
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except (OSError, IndexError):
        return "?"


def _finite(d: dict[str, Any]) -> dict[str, Any]:
    """nan as null: JSON has no nan."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v
            for k, v in d.items()}


def _param(text: str) -> tuple[str, Any]:
    k, sep, v = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r}: give NAME=VALUE")
    for conv in (int, float):
        with contextlib.suppress(ValueError):
            return k, conv(v)
    return k, {"true": True, "false": False}.get(v.lower(), v)


DEFAULT_PARAMS = {"compress": {"level": 2, "threads": 0, "corpus_mib": 8}}


@contextlib.contextmanager
def _turn(beside: bool, log: Callable[[str], None]) -> Iterator[None]:
    """This process's ledger (what it makes is known as its) and the host's measuring turn."""
    from isotax.host import owners
    from isotax.run.measuring import measuring_turn

    owners.claim()
    with measuring_turn(beside, log):
        yield


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0, help="time budget (default 10)")
    ap.add_argument("--env", default="runc", help="the environment kind against native")
    ap.add_argument("--network", default="host", help="its network (default host)")
    ap.add_argument("--workload", default="compress")
    ap.add_argument("--param", type=_param, action="append", default=[],
                    help="NAME=VALUE of the point (default: the quick plan's compress point)")
    ap.add_argument("--length-param", default="", help="the point's length knob "
                    "(default: corpus_mib for compress, seconds for rr)")
    ap.add_argument("--gap", type=float, default=90.0,
                    help="seconds between the halves of a between-rounds pair (default 90)")
    ap.add_argument("--phases", default=",".join(DEFAULT_PHASES),
                    help="which phases, comma-separated, of " +
                    ", ".join(n for n, _ in PHASES) + " (default: all but interleave)")
    ap.add_argument("--cell-runs", type=int, default=4,
                    help="runs per cell in the interleave phase (default 4)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", type=Path, help="write the rows and every run here")
    ap.add_argument("--beside", action="store_true",
                    help="measure beside a run already measuring here instead of waiting")
    args = ap.parse_args()
    args.phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = [p for p in args.phases if p not in dict(PHASES)]
    if unknown or not args.phases or args.cell_runs < 1:
        print(f"variance_components: --phases {','.join(unknown) or '(none)'}: give phases of "
              f"{', '.join(n for n, _ in PHASES)}; --cell-runs at least 1", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("variance_components: run as root (it starts containers)", file=sys.stderr)
        return 2

    from isotax import protocols
    from isotax.host import owners
    from isotax.image.build import ensure_image
    from isotax.run.interrupts import interrupts_for_this_process_only

    if args.workload not in protocols.workloads():
        print(f"variance_components: no workload {args.workload!r}", file=sys.stderr)
        return 2
    cls = protocols.workloads()[args.workload]
    if hasattr(cls, "launch_and_measure"):
        print("variance_components: a launching workload (startup, density) starts its own "
              "instances; give one that runs in an instance", file=sys.stderr)
        return 2
    given = dict(args.param)
    args.params = {**DEFAULT_PARAMS.get(args.workload, {}), **given}
    known = {p.name: p for p in cls.params}
    for k, v in args.params.items():
        why = "not a parameter" if k not in known else known[k].problem(v)
        if why:
            print(f"variance_components: {args.workload} {k}={v!r}: {why}", file=sys.stderr)
            return 2

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    rng = random.Random(args.seed)
    native, other = "native", args.env
    image = ensure_image(protocols.image_recipe(),
                         log=lambda m: log(f"image: {m}"))
    interrupted = False
    with _turn(args.beside, log):
        workdir = Path(owners.mark(tempfile.mkdtemp(prefix="itx-vc-", dir="/var/tmp")))
        b = Bench(args, image, workdir, log)
        load0 = _loadavg()
        log(f"{args.workload} {param_words(b.params())}: native vs {other} ({args.network}), "
            f"{args.minutes:g} min")
        try:
            with interrupts_for_this_process_only(), contextlib.ExitStack() as stack:
                if cls.needs_loadgen:
                    from isotax.loadgen.local import open_loadgen
                    b.loadgen = stack.enter_context(open_loadgen())
                stack.callback(b.stop_all)  # before the load generator goes
                b.start(native, "native", "host")
                b.start(other, other, args.network)
                run_phases(b, rng, (native, other))
        except KeyboardInterrupt:
            interrupted = True
            log("interrupted: the results so far follow")
        finally:
            b.stop_all()
            shutil.rmtree(workdir, ignore_errors=True)
        owners.release()
    took = b.budget.now()
    rows = analyse(b, native, other) if set(args.phases) & set(DEFAULT_PHASES) else []
    if "interleave" in args.phases:
        rows += interleave.analyse_interleave(b.runs, native, other, args.cell_runs)
    print(f"\n{args.workload} {param_words(b.params())}: native vs {other} (network "
          f"{args.network}); {len(b.runs)} runs in {took / 60:.1f} min; load average "
          f"{load0} at the start, {_loadavg()} at the end; log units (sd of log values ~ "
          "CV)\n")
    print(table(rows))
    for f in b.failures:
        print(f"failed: {f}")
    if args.json:
        args.json.write_text(json.dumps({
            "workload": args.workload, "params": b.params(), "environments": [native, other],
            "network": args.network, "minutes": args.minutes, "seconds": took,
            "loadavg": [load0, _loadavg()],
            "components": [_finite(asdict(r)) for r in rows],
            "runs": [asdict(r) for r in b.runs], "failures": b.failures},
            indent=1, default=str) + "\n")
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
