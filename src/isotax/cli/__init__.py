"""isotax command line: the `main` group, which adds every command module's commands: report ·
export · compare · runs in cli/results.py; run in cli/run.py; envs · workloads · image ·
system · doctor in cli/host.py; cluster, fleet and import, check, claims in their own
modules. What they share (the console, the store options, fail) is cli/common.py.

`main` reads as the pipeline: plan -> image -> environments -> cells -> store -> report.
Every user error is one line on stderr and exit status 2; a disk that fills while a command
writes is one line and exit status 75 (EX_TEMPFAIL: free space, then run it again).

Each command imports the stages it uses inside its own function, for start-up speed alone:
`isotax --help` takes 0.07 s so, against 1.3 s with every stage and plugin imported (numpy,
scipy, matplotlib, pyroute2, every environment and workload module; measured on the 2-core
development machine). That is the only reason for an import inside a function in isotax.
"""

from __future__ import annotations

import errno
import sys
from pathlib import Path

import click

from isotax.cli.common import EXIT_DISK_FULL
from isotax.version import __version__


class _Commands(click.Group):
    """The commands. A disk that fills under any of them (a report, an export, a comparison)
    ends in one line naming where, not a traceback: exit status EXIT_DISK_FULL. `isotax run`
    says more (what the rest of the run needs, how to resume it)."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except OSError as e:  # DiskFull is a StoreError, caught below
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            where = Path(e.filename).parent if e.filename else Path.cwd()
            what = f"writing {e.filename}" if e.filename else e.strerror or "writing"
        except Exception as e:
            from isotax.store.base import DiskFull

            if not isinstance(e, DiskFull):
                raise
            where, what = e.path, f"writing {e.what}"
        from isotax.host.facts import diskspace

        free = diskspace.free_bytes(where)
        click.echo(f"isotax: the disk under {where} is full ({what}): {diskspace.human(free)} "
                   "free; free space there, then run the command again", err=True)
        sys.exit(EXIT_DISK_FULL)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="isotax")
def main() -> None:
    """Measure the isolation tax: a workload in a container, sandbox or VM against native."""


# Every command module's commands, added here: a command module imports cli.common, never
# this package or another command module (no import cycle).
from isotax.cli import (  # noqa: E402
    check,
    claims,
    cluster,
    fleet,
    fleet_report,
    host,
    results,
    run,
)

fleet.fleet.add_command(fleet_report.report)
for _command in (run.run, results.report, results.export, results.compare_cmd,
                 results.runs_cmd, check.check_cmd, claims.claims_cmd, host.envs,
                 host.workloads, host.image, host.system, host.doctor, cluster.cluster,
                 fleet.fleet, fleet.import_cmd):
    main.add_command(_command)
