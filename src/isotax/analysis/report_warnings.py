"""The report's warnings: each kind with its short title and its words, which say what to do
next (hyperfine's style), and the thresholds that raise them. Made by
isotax.analysis.report_data; the terminal groups them by kind (isotax.report.terminal)."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Any


class ReportWarning(Enum):
    """Every warning says what to do next (hyperfine's style). Each kind has a short title
    (the terminal groups warnings by kind under it) and the members run from the most
    important to the least: the terminal lists the kinds in this order."""

    INCOMPLETE = ("incomplete run",
                  "the run is {status}: `isotax run --resume {run}` finishes it.")
    EMULATED = ("emulated, not KVM",
                "{env} ran under TCG software emulation: its ratios measure the emulator, not "
                "KVM's overhead. Run on a host with hardware KVM for VM overhead figures.")
    UNAVAILABLE = ("environment did not run", "{env} did not run: {reason}")
    DIED = ("environment died mid-run",
            "{env} died {deaths} during the run (last: {why}); {outcome}. A cell of it that was "
            "running then failed (see Failures): find what killed it (the host's kernel log, "
            "its OOM killer), then rerun for clean figures.")
    FAILURES = ("failed cells",
                "{count} cell(s) of {env} failed (see Failures); rerun or fix, then "
                "`isotax run --resume` finishes an interrupted run.")
    PARITY = ("unequal resources",
              "unequal resources: {problem} (the plan's parity = \"flag\" let it run; "
              "differences from this alone are not isolation overhead).")
    CONCURRENT = ("measured beside another run",
                  "{env}: {count} cell(s) ({points}) ran while run {other} (PID {pid}) measured "
                  "on this host too, sharing its CPUs: those figures include that run's load; "
                  "rerun without --beside (runs then take turns) for clean figures.")
    FINGERPRINT_FORCED = ("resumed on a changed host",
                          "the run was resumed with --force on a host that differed from the "
                          "one it started on ({changes}): its repetitions before and after "
                          "may not be comparable; rerun the plan whole for clean figures.")
    VERSION_MISMATCH = ("tool versions differ",
                        "{tool} differs between {env} ({other}) and {base} ({version}): "
                        "{fix}.")
    LOADGEN_SATURATED = ("load generator saturated",
                         "{env} {point}: {words}. Give the load generator more CPU "
                         "(placement = \"split\", fewer streams or connections) or a faster "
                         "client, or read this figure as the client's ceiling.")
    BLAS_CORE = ("OpenBLAS chose other kernels",
                 "OpenBLAS ran its {core} kernels in {env} but {base_core} in {base} "
                 "({workloads}): the difference includes the CPU model the environment shows, "
                 "not only isolation. Give a VM the host's CPU model (profile tuned, or "
                 "options.cpu_model) to compare the same kernels.")
    FEW_REPETITIONS = ("too few repetitions",
                       "only {n} repetition(s) per cell: ratio intervals need at least 2, "
                       "better 5 or more; raise `repetitions` (or [verdicts] "
                       "max_repetitions, for rounds where they decide) in the plan.")
    UNDECIDED = ("undecided verdicts",
                 "{undecided} of {total} headline ratio(s) to the baseline are undecided (see "
                 "Verdicts, each with why): let [verdicts] add rounds (max_repetitions, "
                 "budget_s), quiet the host (`isotax system tune`), or read them as not yet "
                 "known.")
    CANARY = ("A/A canary not equal",
              "the A/A canary ({env}, the baseline run a second time) came out {verdict} on "
              "{points}: the host or the method misbehaved during this run (load that came and "
              "went, a regime longer than a block); distrust this run's verdicts near that "
              "size and rerun.")
    REJUDGED = ("verdicts judged again",
                "{count} verdict(s) read now differ from the ones the run ended with ({why}); "
                "the Verdicts section shows the run's own, as stored.")
    CORRELATED_PAIRS = ("correlated pairs",
                        "{env}: {count} ratio(s) have a lag-1 autocorrelation of their pair "
                        "ratios above {limit} (most {point}: {lag1:.2f}): the host's slow "
                        "load reaches across pairs, so their verdicts are less certain than "
                        "95%; rerun when the host is quieter.")
    NUMA_SINGLE_NODE = ("NUMA pinning on a one-node host",
                        "this host has one NUMA node: pinning {envs} to it cannot show a "
                        "placement effect; run the plan on a multi-node host for that.")
    NO_TELEMETRY = ("cells without telemetry",
                    "{count} measured cell(s) have no telemetry (a run recorded before "
                    "isotax watched runs, or [telemetry] found nothing): their results carry "
                    "no cost per unit or limiter; rerun for them.")
    HIGH_VARIANCE = ("high variance",
                     "{env}: {count} result(s) vary by more than 5% between repetitions, "
                     "most {workload} {metric} (coefficient of variation {cv:.1%}); quiet the "
                     "host (`isotax system tune`), add repetitions, or let [verdicts] add rounds.")
    OUTLIERS = ("outlying values",
                "{env}: {count} outlying value(s) (modified z-score beyond 3.5) in {metrics} "
                "(see Outliers); they are kept in every mean and interval. Check what else "
                "ran on the host then, or add repetitions.")

    def __init__(self, title: str, template: str) -> None:
        self.title = title
        self.template = template

    def say(self, subject: str | None = None, **kw: Any) -> Warned:
        """The warning in words; subject (the environment it is about) defaults to env."""
        return Warned(self.template.format(**kw), self,
                      str(kw.get("env", "")) if subject is None else subject)


class Warned(str):
    """A warning's text (what every report prints in full) that knows its kind and the
    environment it is about ("" for the run as a whole), so the terminal can group them."""

    kind: ReportWarning
    subject: str

    def __new__(cls, text: str, kind: ReportWarning, subject: str = "") -> Warned:
        self = super().__new__(cls, text)
        self.kind = kind
        self.subject = subject
        return self

    def __reduce__(self) -> tuple[Any, ...]:  # copy and pickle keep the kind
        return Warned, (str(self), self.kind, self.subject)


def by_kind(warnings: Sequence[str]) -> list[tuple[ReportWarning | None, list[str]]]:
    """The warnings grouped by kind, the most important kind first (ReportWarning's order),
    each kind's in the order they were said; warnings without a kind (plain str) last."""
    groups: dict[ReportWarning | None, list[str]] = {}
    for w in warnings:
        groups.setdefault(w.kind if isinstance(w, Warned) else None, []).append(w)
    order = list(ReportWarning)
    return [(k, groups[k]) for k in sorted(
        groups, key=lambda k: len(order) if k is None else order.index(k))]


def folds(warnings: Sequence[str]) -> list[tuple[ReportWarning | None, list[str]]]:
    """The warnings as the reports list them, most important kind first: a kind said several
    times (outliers, variance in each environment) is one entry, to fold under its title and
    whom(); every other warning is an entry of its own with no kind, shown whole."""
    out: list[tuple[ReportWarning | None, list[str]]] = []
    for kind, said in by_kind(warnings):
        if kind is None or len(said) < 2:
            out += [(None, [w]) for w in said]
        else:
            out.append((kind, said))
    return out


def subjects(said: Sequence[str]) -> list[str]:
    """The environments a kind's warnings are about, each once, in order."""
    return list(dict.fromkeys(w.subject for w in said if isinstance(w, Warned) and w.subject))


def whom(said: Sequence[str]) -> str:
    """What follows a folded kind's title: " in 6 environments: runc, crun, ...", or how many
    warnings where they name no environment."""
    about = subjects(said)
    return f" in {len(about)} environments: {', '.join(about)}" if about else f" ({len(said)})"


HIGH_CV = 0.05  # above 5% a ratio of a few percent is hard to trust
# Lag-1 autocorrelation of a ratio's pair log ratios above this is warned about: in
# simulation a lag-1 of 0.3 already pushes false verdicts past 5% (docs/statistics.md).
HIGH_LAG1 = 0.3
