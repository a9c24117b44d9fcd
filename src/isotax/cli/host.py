"""The commands about the host rather than its runs: envs, workloads, image, system, doctor.
Registered on isotax.cli.main by that package; each imports the stages it uses
inside its own function, for start-up speed (isotax.cli's docstring says why)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.table import Table

from isotax.cli.common import console, fail, image_artifacts, image_choice, make_console, recipe_for

if TYPE_CHECKING:
    from isotax.host.tune import TuneReport


@click.command()
def envs() -> None:
    """List every environment kind: available here, or why not and the fix."""
    from isotax.protocols import environments

    t = Table("environment", "available", "description / reason")
    for kind, cls in sorted(environments().items()):
        a = cls().available()
        # An available kind may still have something to say in advance (a VM: "TCG here,
        # because ..."), which the run would otherwise say only when it starts.
        what = cls.description if not a.ok or not a.reason else f"{cls.description}; {a.reason}"
        t.add_row(kind, "yes" if a.ok else "no", what if a.ok else str(a))
    make_console().print(t)


@click.command()
@click.option("--packages", is_flag=True,
              help="Print only the Debian packages that running every workload on this host "
                   "needs (each workload's image packages and its load generator's client "
                   "packages), one per line: what scripts/setup.sh installs.")
def workloads(packages: bool) -> None:
    """List every workload and its parameters."""
    from isotax.protocols import workloads as all_workloads

    if packages:
        wanted = (p for cls in all_workloads().values()
                  for p in (*cls.packages, *cls.client_packages))
        click.echo("\n".join(dict.fromkeys(wanted)))
        return
    t = Table("workload", "parameter", "default", "meaning")
    for name, cls in sorted(all_workloads().items()):
        t.add_row(f"[bold]{name}[/]", "", "", cls.description)
        for p in cls.params:
            t.add_row("", p.name, repr(p.default), p.help)
    make_console().print(t)


@click.group()
def image() -> None:
    """Build, show and remove the workload image."""


_distribution_option = click.option(
    "--distribution", metavar="RELEASE",
    help="The Debian release the image is built from: bookworm or trixie (default: this "
         "host's own release when it is one of those, else bookworm). A plan chooses with "
         "[image] distribution.")


@image.command("build")
@_distribution_option
def image_build(distribution: str | None) -> None:
    """Build the workload image (cached by the hash of its recipe); prints its hash and
    directory."""
    choice = image_choice(distribution)
    console.print(f"[dim]image:[/] {choice.words()}")
    art = image_artifacts(choice)
    click.echo(f"{art.recipe_hash} {art.root}")


@image.command("oci-archive")
@click.argument("out", type=click.Path(dir_okay=False, writable=True))
@click.option("--ref", metavar="NAME:TAG", help="The image's name in the archive "
              "(default isotax/workload:<recipe hash>).")
@_distribution_option
def image_oci_archive(out: str, ref: str | None, distribution: str | None) -> None:
    """Write the workload image as an OCI archive to OUT, for a registry that a cluster's
    nodes pull from (`skopeo copy oci-archive:OUT docker://REGISTRY/isotax-workload:TAG`);
    then `isotax run --kubeconfig K --pod-image REGISTRY/isotax-workload:TAG` runs its pods
    on the same bits as every other environment."""
    from isotax.image import oci_archive

    art = image_artifacts(image_choice(distribution))
    name = ref or f"isotax/workload:{art.recipe_hash}"
    with open(out, "wb") as f:
        digest = oci_archive.write(art.tar, name, f, {"isotax": "1",
                                                      "isotax.recipe": art.recipe_hash})
    click.echo(f"{out}: {name} (layer {digest[:19]}, {Path(out).stat().st_size >> 20} MiB)")


@image.command("show")
def image_show() -> None:
    """Show the cached images."""
    from isotax.image.build import default_cache_dir, show_images
    from isotax.image.distribution import DISTRIBUTIONS

    default = image_choice()
    t = Table("hash", "layer", "distribution", "current", "built (UTC)", "size", "kernel",
              caption=f"in {default_cache_dir()}/{{images,base}}/<hash>; current: what this "
                      f"isotax builds for each release (default here: {default.codename})")
    t.columns[0].no_wrap = True
    recipes = [recipe_for(image_choice(name)) for name in DISTRIBUTIONS]
    for im in show_images(recipes):
        size = f"{float(str(im.get('size_bytes', 0))) / 2**30:.1f} GiB"
        built = str(im.get("built_at", ""))[:16].replace("T", " ")
        t.add_row(str(im["hash"]), str(im.get("layer", "")), str(im.get("distribution", "")),
                  "yes" if im.get("current") else "", built, size, str(im.get("kernel", "")))
    make_console().print(t)


@image.command("rm")
@click.argument("which", default="all")
def image_rm(which: str) -> None:
    """Remove a cached image by hash prefix, or all of them."""
    from isotax.image.build import remove_image

    try:
        removed = remove_image(which)
    except (KeyError, ValueError) as e:
        fail(f"{e}; `isotax image show` lists the cached images")
    click.echo(f"removed {removed}")


@click.group()
def system() -> None:
    """The host's fingerprint (recorded with every run) and a benchmarking profile for it."""


@system.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print the fingerprint as JSON.")
def system_show(as_json: bool) -> None:
    """Show what isotax records about this host: CPU, SMT, NUMA, governor, THP, mitigations..."""
    import json

    from isotax.host.facts.fingerprint import fingerprint, show_rows

    try:
        fp = fingerprint()
    except OSError as e:
        fail(f"cannot read the host's fingerprint: {e}; run isotax on Linux with /proc and /sys")
    if as_json:
        click.echo(json.dumps(fp, indent=2, sort_keys=False))
        return
    t = Table("what", "value", caption="recorded with every run; `--json` for all of it")
    t.columns[0].no_wrap = True
    for what, value in show_rows(fp):
        t.add_row(what, value)
    make_console().print(t)


state_option = click.option(
    "--state", "state_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="Where the values before tuning are saved.  [default: /var/lib/isotax/tune-state.json]")
# A synthetic /proc + /sys tree instead of the host's (the tests' captured trees).
root_option = click.option("--root", type=click.Path(file_okay=False, path_type=Path),
                           default=Path("/"), hidden=True)


def _tune_outcome(report: TuneReport, absent_note: bool) -> None:
    """The table (knob, before, after, result), one final line, and the exit status: 0 when
    everything this host has was set, 1 when a knob it has refused the value."""
    t = Table("knob", "before", "after", "result")
    t.columns[0].no_wrap = True
    for row in report.rows():
        t.add_row(*row)
    make_console().print(t)
    done = "tuned" if report.action == "tune" else "restored"
    absent = sorted({r.knob.group for r in report.absent})
    note = (f"; not on this host (the table says why): {', '.join(absent)}"
            if absent and absent_note else "")
    if report.refused:
        names = sorted({r.knob.name for r in report.refused})
        click.echo(f"{report.action}: could not set {', '.join(names)} (see the table){note}"
                   + (f"; the saved values stay in {report.state_file}"
                      if report.action == "reset" else ""))
        sys.exit(1)
    if report.action == "tune":
        click.echo(f"{done}: every knob this host has is set{note}; values before saved in "
                   f"{report.state_file}; undo with `isotax system reset`")
    else:
        click.echo(f"{done}: every saved value is back; removed {report.state_file}")


def _require_root(root: Path, what: str) -> None:
    if root == Path("/") and os.geteuid() != 0:
        fail(f"{what} writes /proc/sys and /sys: run it as root (sudo isotax system {what})")


@system.command("tune")
@click.option("--force", is_flag=True,
              help="Tune over an existing state file (its saved values are lost).")
@state_option
@root_option
def system_tune(force: bool, state_file: Path | None, root: Path) -> None:
    """Apply the benchmarking profile: governor performance, turbo off, THP madvise, ASLR off,
    perf_event_paranoid -1, nmi_watchdog 0; the values before are saved for `reset`.
    Exit 0 when every knob this host has is set (absent ones are listed), 1 when the kernel
    refused one."""
    from isotax.host.tune import DEFAULT_STATE, TuneError, tune

    _require_root(root, "tune")
    try:
        report = tune(root, state_file or DEFAULT_STATE, force=force)
    except TuneError as e:
        fail(str(e))
    _tune_outcome(report, absent_note=True)


@system.command("reset")
@state_option
@root_option
def system_reset(state_file: Path | None, root: Path) -> None:
    """Undo `isotax system tune`: write back exactly the saved values."""
    from isotax.host.tune import DEFAULT_STATE, TuneError, reset

    _require_root(root, "reset")
    try:
        report = reset(root, state_file or DEFAULT_STATE)
    except TuneError as e:
        fail(str(e))
    _tune_outcome(report, absent_note=False)


@click.command()
@click.option("--fix", is_flag=True,
              help="Remove what dead isotax processes left behind (never what a live run owns).")
def doctor(fix: bool) -> None:
    """Check the host: environments available, and nothing left behind by isotax."""
    from isotax.host import owners
    from isotax.protocols import environments
    from isotax.run.leaks import find_leaks
    from isotax.run.recovery import owner_of, recover

    envs.callback()  # type: ignore[misc]
    # What a kind has to say about this host beyond its availability (a VM's accelerator,
    # proven by a probe boot of the image: cached, up to 30 s the first time), each line
    # once (the QEMU kinds share theirs).
    said: set[str] = set()
    for _, cls in sorted(environments().items()):
        for line in cls.doctor_notes():
            if line not in said:
                said.add(line)
                click.echo(line)
    if fix:
        if os.geteuid() != 0:
            fail("isotax doctor --fix removes namespaces, links, rules and processes: run it "
                 "as root")
        owners.claim()
        recovered = recover()
        click.echo(f"fixed: {recovered.summary() or 'nothing to remove'}")
        for lo, why in recovered.failed:
            click.echo(f"  could not remove {lo.what}: {why}")
    ledgers = owners.ledgers()
    found = [(lo, owner_of(lo, ledgers)) for lo in find_leaks()]
    in_use = [(lo, who) for lo, who in found if who.ledger is not None and who.ledger.live]
    left = [(lo, who) for lo, who in found if (lo, who) not in in_use]
    if in_use:
        runs = sorted({who.words for _, who in in_use})
        click.echo(f"in use by live isotax processes: {len(in_use)} resource(s) of "
                   f"{'; '.join(runs)}")
    if left:
        click.echo("left behind by isotax (`isotax doctor --fix` removes them; or remove each "
                   "by hand):\n  " + "\n  ".join(f"{lo} [{who.words}]" for lo, who in left))
        sys.exit(1)
    click.echo("no isotax resources left behind")
