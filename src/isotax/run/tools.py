"""Each workload tool's version inside a started environment, recorded with it: the same
bits everywhere should give the same versions, and the report shows them side by side.

All of an environment's version commands run in one exec, side by side: an exec into an
emulated VM costs 0.1-0.3 s, a dozen of them one after the other were seconds of every run's
start. Where that one exec fails, each command is asked on its own, as before.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from isotax import protocols
from isotax.plan import Plan
from isotax.protocols import Instance

_MARK = "itx-tool"


def tool_versions(inst: Instance, plan: Plan) -> dict[str, str]:
    """Each workload tool's version inside the environment (same bits => same versions): the
    first line it prints, or "unavailable (<exit status>)"."""
    wls = protocols.workloads()
    argvs: dict[str, tuple[str, ...]] = {}
    for w in plan.workloads:
        for tool, argv in wls[w.name].tools.items():
            argvs.setdefault(tool, tuple(argv))
    if not argvs:
        return {}
    names = list(argvs)
    done = inst.exec(["sh", "-c", versions_script([argvs[t] for t in names]), "sh",
                      inst.scratch], timeout=120)
    answers = parse_versions(done.stdout, len(names)) if done.returncode == 0 else None
    if answers is None:
        answers = [_one(inst, argvs[t]) for t in names]
    return {t: first if rc == 0 else f"unavailable ({rc})"
            for t, (rc, first) in zip(names, answers, strict=True)}


def _one(inst: Instance, argv: Sequence[str]) -> tuple[int, str]:
    done = inst.exec(list(argv), timeout=60)
    lines = done.stdout.strip().splitlines()
    return done.returncode, lines[0] if lines else ""


def versions_script(argvs: Sequence[Sequence[str]]) -> str:
    """A POSIX sh script (its $1: a writable directory, the instance's scratch) that runs
    every argv at once (stdout to a file each, stderr dropped: a lone exec's first line was
    stdout's too) and then prints one line per argv, in order:
    "itx-tool <index> <exit status> <first non-empty line of its output>". Pure."""
    runs = " ".join(f'({shlex.join(a)} > "$d/{i}" 2>/dev/null; echo $? > "$d/{i}.rc") &'
                    for i, a in enumerate(argvs))
    report = " ".join(
        f'printf "{_MARK} {i} %s %s\\n" "$(cat "$d/{i}.rc")" '
        f'"$(grep -m 1 . "$d/{i}" | sed "s/^[[:space:]]*//")";'
        for i in range(len(argvs)))
    return f'd=$(mktemp -d "$1/itx-tools.XXXXXX") || exit 1; {runs} wait; {report} rm -rf "$d"'


def parse_versions(text: str, n: int) -> list[tuple[int, str]] | None:
    """(exit status, first line) per argv from versions_script's output; None unless all n
    are there. Pure."""
    found: dict[int, tuple[int, str]] = {}
    for line in text.splitlines():
        parts = line.split(" ", 3)
        if len(parts) < 3 or parts[0] != _MARK:
            continue
        try:
            i, rc = int(parts[1]), int(parts[2])
        except ValueError:
            return None
        found[i] = (rc, parts[3].strip() if len(parts) > 3 else "")
    if sorted(found) != list(range(n)):
        return None
    return [found[i] for i in range(n)]
