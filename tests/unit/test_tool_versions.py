"""run.tools: every version command in one exec gives what each gives alone."""

from __future__ import annotations

import subprocess
from pathlib import Path

from isotax import protocols
from isotax.run.tools import parse_versions, versions_script


def _alone(argv: list[str]) -> tuple[int, str]:
    """What a lone exec of argv gave: its status and its stdout's first line."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        return 127, ""
    lines = p.stdout.strip().splitlines()
    return p.returncode, lines[0] if lines else ""


def test_one_script_answers_like_each_command_alone(tmp_path: Path) -> None:
    # Every registered workload's real version commands (the host has most of the tools),
    # and the cases a version command can end in: not found, a failure, blank lines first.
    argvs = [list(a) for w in protocols.workloads().values() for a in w.tools.values()]
    argvs += [["/nonexistent/itx-no-such-tool", "--version"], ["sh", "-c", "echo out; exit 3"],
              ["sh", "-c", "echo; echo '  first  line'; echo second"]]
    done = subprocess.run(["sh", "-c", versions_script(argvs), "sh", str(tmp_path)],
                          capture_output=True, text=True, check=True)
    got = parse_versions(done.stdout, len(argvs))
    assert got is not None
    assert got == [_alone(a) for a in argvs]
    assert list(tmp_path.iterdir()) == []  # its files are gone


def test_parse_needs_every_answer() -> None:
    text = "itx-tool 0 0 xz 5.4\nitx-tool 2 127 \n"
    assert parse_versions(text, 3) is None
    assert parse_versions(text + "itx-tool 1 1 x\n", 3) == [(0, "xz 5.4"), (1, "x"),
                                                            (127, "")]
    assert parse_versions("itx-tool zero 0 x\n", 1) is None
