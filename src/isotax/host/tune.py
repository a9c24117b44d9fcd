"""A benchmarking profile for the host (`isotax system tune`) and its exact undo (`reset`).

Each knob is one file under /proc/sys or /sys: its current value is read, the profile's value
written, and the file read again to verify. Before anything is written, the values found are
saved to a JSON state file; `reset` writes exactly those back and removes the file. A second
`tune` over an existing state file is refused (it would save the tuned values as the
"originals"). What a host lacks (no cpufreq driver in a VM) is reported with the reason, not
treated as a failure.

The profile, and why each value:
- cpufreq governor `performance` on every CPU: no ramp-up from a low frequency at the start of
  each sample, which would charge a short run (a container start) more than a long one.
- turbo off (intel_pstate/no_turbo = 1 or cpufreq/boost = 0): turbo frequency depends on how
  many cores are busy and on temperature, so one environment's extra helper thread (a shim, a
  VM's I/O thread) would lower the clock the workload gets; a fixed clock compares like with
  like.
- transparent hugepages `madvise`, defrag `madvise` (the kernel's default): the same for
  native and containers (one kernel, the same binaries asking the same way), and a VM's guest
  RAM still gets huge pages because QEMU madvises it, as on every KVM host. `always` would
  make results depend on how fragmented memory happens to be at fault time and on khugepaged
  collapsing pages in the background (run-to-run variance); `never` would take huge pages from
  VMs that every real deployment gives them, which would inflate the VM's tax.
- ASLR off (kernel.randomize_va_space = 0): stack, heap and library addresses (their cache
  set and TLB placement) stop moving from run to run, a known source of variance between
  repetitions. It weakens the host's security until `reset`.
- kernel.perf_event_paranoid = -1: host-wide perf counting (isotax's perf stat of every
  process of an environment) works without per-process limits.
- kernel.nmi_watchdog = 0: the hard-lockup detector holds a hardware counter and fires NMIs
  on every CPU; off, the counter is free and the interrupts stop.
Left out on purpose: vm.swappiness only acts under memory pressure, which no measurement
should be in, and where isotax does approach it (density up to a memory floor) changing it
would change what is measured, not its noise; dropping caches is an action, not a setting.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from isotax.host.facts.fingerprint import parse_cpuinfo, parse_selected
from isotax.host.facts.numa import format_cpulist
from isotax.host.locks import exclusive
from isotax.parsers.procfs import parse_cpulist

DEFAULT_STATE = Path("/var/lib/isotax/tune-state.json")
STATE_FORMAT = 1
# Outcomes of one knob.
CHANGED, ALREADY, ABSENT, REFUSED = "changed", "already", "absent", "refused"


class TuneError(Exception):
    """Bad input (a state file in the way, or none to reset from): one line with the fix."""


@dataclass(frozen=True)
class Knob:
    group: str  # what the table shows ("governor"); per-CPU knobs share a group
    path: str  # relative to the root
    want: str
    member: str = ""  # "cpu3" for a per-CPU knob
    selector: bool = False  # "always [madvise] never": the bracketed word is the value
    absent: str = ""  # why a host may lack the file, said when it does

    @property
    def name(self) -> str:
        return f"{self.group} {self.member}".strip()


@dataclass(frozen=True)
class Result:
    knob: Knob
    before: str | None
    after: str | None
    outcome: str  # CHANGED, ALREADY, ABSENT or REFUSED
    reason: str = ""

    def text(self, short: bool = False) -> str:
        """"changed (old -> new)", "already so" or "could not change: why"; short: the
        table's "changed" (its before and after columns say the rest)."""
        if self.outcome == CHANGED:
            return "changed" if short else f"changed ({self.before} -> {self.after})"
        if self.outcome == ALREADY:
            return "already so"
        return f"could not change: {self.reason}"


@dataclass
class TuneReport:
    action: str  # "tune" or "reset"
    results: list[Result]
    state_file: Path
    state_kept: bool = field(default=True)

    @property
    def refused(self) -> list[Result]:
        return [r for r in self.results if r.outcome == REFUSED]

    @property
    def absent(self) -> list[Result]:
        return [r for r in self.results if r.outcome == ABSENT]

    @property
    def ok(self) -> bool:
        """Everything this host has was set (absent knobs do not count against it)."""
        return not self.refused

    def rows(self) -> list[tuple[str, str, str, str]]:
        """(knob, before, after, result) with per-CPU knobs that ended alike in one row."""
        return display_rows(self.results)


# --- pure parts: the profile's knobs, the plan from current values, the rows ----------------

def profile(cpus: Sequence[int], vm: bool, turbo_file: str | None) -> list[Knob]:
    """The benchmarking profile's knobs for a host with these online CPUs; vm: the host is a
    VM (the reasons say so); turbo_file: the turbo switch this host has, if any."""
    where = " in this VM" if vm else ""
    gov_why = (f"no cpufreq driver{where} (the hypervisor sets the frequency)" if vm
               else "no cpufreq driver loaded (load intel_pstate or acpi-cpufreq)")
    knobs = [Knob("governor", f"sys/devices/system/cpu/cpu{n}/cpufreq/scaling_governor",
                  "performance", member=f"cpu{n}", absent=gov_why) for n in cpus]
    turbo_why = (f"no intel_pstate/no_turbo or cpufreq/boost{where}"
                 + (" (the host decides turbo)" if vm else " (the driver has no turbo switch)"))
    if turbo_file == "boost":
        knobs.append(Knob("turbo", "sys/devices/system/cpu/cpufreq/boost", "0",
                          absent=turbo_why))
    else:  # intel_pstate's, or the one named when neither exists
        knobs.append(Knob("turbo", "sys/devices/system/cpu/intel_pstate/no_turbo", "1",
                          absent=turbo_why))
    thp_why = "kernel without transparent hugepages"
    knobs += [
        Knob("THP enabled", "sys/kernel/mm/transparent_hugepage/enabled", "madvise",
             selector=True, absent=thp_why),
        Knob("THP defrag", "sys/kernel/mm/transparent_hugepage/defrag", "madvise",
             selector=True, absent=thp_why),
        Knob("ASLR", "proc/sys/kernel/randomize_va_space", "0",
             absent="kernel without kernel.randomize_va_space"),
        Knob("perf_event_paranoid", "proc/sys/kernel/perf_event_paranoid", "-1",
             absent="kernel without perf events (no kernel.perf_event_paranoid)"),
        Knob("nmi_watchdog", "proc/sys/kernel/nmi_watchdog", "0",
             absent="kernel without the lockup detector (no kernel.nmi_watchdog)"),
    ]
    return knobs


def parse_value(knob: Knob, text: str) -> str:
    """A knob file's text -> its value ("always [madvise] never" -> "madvise"; "2\\n" -> "2")."""
    return parse_selected(text) if knob.selector else text.strip()


# A knob's reading: its value, or None and why not.
Reading = tuple[str | None, str]


def plan(knobs: Sequence[Knob], current: Mapping[str, Reading]) -> tuple[list[Knob],
                                                                        list[Result]]:
    """From the current values (by path): the knobs to write, and the results already known
    (absent, unreadable, already at the wanted value)."""
    writes: list[Knob] = []
    known: list[Result] = []
    for k in knobs:
        value, why = current[k.path]
        if value is None:
            known.append(Result(k, None, None, ABSENT if not why else REFUSED,
                                why or k.absent))
        elif value == k.want:
            known.append(Result(k, value, value, ALREADY))
        else:
            writes.append(k)
    return writes, known


def display_rows(results: Sequence[Result]) -> list[tuple[str, str, str, str]]:
    """One row per knob, except that per-CPU knobs of a group with the same before, after and
    result share one row ("governor cpu0-63")."""
    rows: list[tuple[str, str, str, str]] = []
    merged: dict[tuple[str, str, str, str], list[int]] = {}
    order: list[tuple[str, str, str, str]] = []
    for r in results:
        cells = (r.before if r.before is not None else "-",
                 r.after if r.after is not None else "-", r.text(short=True))
        if r.knob.member.startswith("cpu") and r.knob.member[3:].isdigit():
            key = (r.knob.group, *cells)
            if key not in merged:
                merged[key] = []
                order.append(key)
                rows.append(key)  # placeholder, named below
            merged[key].append(int(r.knob.member[3:]))
        else:
            rows.append((r.knob.name, *cells))
    named = {key: (f"{key[0]} cpu{format_cpulist(merged[key])}", *key[1:]) for key in order}
    return [named.get(row, row) for row in rows]


def state_document(root: Path, results: Sequence[tuple[Knob, str]]) -> dict[str, object]:
    """The state file's content: each existing knob's value before tuning."""
    return {"isotax_tune_state": STATE_FORMAT, "root": str(root),
            "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "knobs": [{"group": k.group, "member": k.member, "path": k.path,
                       "selector": k.selector, "value": v} for k, v in results]}


def knobs_from_state(doc: Mapping[str, object]) -> list[Knob]:
    """The knobs a state file restores: each to its saved value. ValueError if malformed."""
    items = doc.get("knobs")
    if doc.get("isotax_tune_state") != STATE_FORMAT or not isinstance(items, list):
        raise ValueError("not an isotax tune state (no isotax_tune_state/knobs)")
    out = []
    for item in items:
        if not (isinstance(item, dict) and isinstance(item.get("path"), str)
                and isinstance(item.get("value"), str)
                and not item["path"].startswith("/") and ".." not in item["path"].split("/")):
            raise ValueError(f"bad knob entry {item!r}")
        out.append(Knob(str(item.get("group", item["path"])), item["path"], item["value"],
                        member=str(item.get("member", "")),
                        selector=bool(item.get("selector", False))))
    return out


# --- the host: reading, writing, the state file ---------------------------------------------

def _errtext(e: OSError) -> str:
    name = errno.errorcode.get(e.errno or 0, "")
    return f"{e.strerror or e}" + (f" ({name})" if name else "")


def read_knob(root: Path, knob: Knob) -> Reading:
    try:
        return parse_value(knob, (root / knob.path).read_text()), ""
    except (FileNotFoundError, NotADirectoryError):
        return None, ""
    except (OSError, UnicodeDecodeError) as e:
        why = _errtext(e) if isinstance(e, OSError) else str(e)
        return None, f"cannot read {knob.path}: {why}"


def write_knob(root: Path, knob: Knob) -> Result:
    """Write the wanted value (as `echo VALUE > FILE` does) and verify by reading it back."""
    before, _ = read_knob(root, knob)
    path = root / knob.path
    try:
        # No O_CREAT: a file the kernel does not offer must not appear in a synthetic tree.
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, (knob.want + "\n").encode())
        finally:
            os.close(fd)
    except OSError as e:
        why = f"write refused: {_errtext(e)}"
        with contextlib.suppress(OSError):
            if e.errno == errno.EACCES and not os.stat(path).st_mode & 0o222:
                why += " (the kernel offers it read-only)"
        return Result(knob, before, before, REFUSED, why)
    after, why_unread = read_knob(root, knob)
    if after != knob.want:
        return Result(knob, before, after, REFUSED,
                      why_unread or f"wrote {knob.want} but it reads back {after}")
    return Result(knob, before, after, CHANGED)


def host_profile(root: Path) -> list[Knob]:
    """The profile for the host under root: its online CPUs, VM or not, its turbo switch."""
    cpu = root / "sys/devices/system/cpu"
    try:
        cpus = parse_cpulist((cpu / "online").read_text())
    except (OSError, ValueError):
        cpus = sorted(int(p.name[3:]) for p in cpu.glob("cpu[0-9]*") if p.name[3:].isdigit())
    try:
        vm = bool(parse_cpuinfo((root / "proc/cpuinfo").read_text())["hypervisor"])
    except OSError:
        vm = False
    turbo = ("no_turbo" if (cpu / "intel_pstate/no_turbo").exists()
             else "boost" if (cpu / "cpufreq/boost").exists() else None)
    return profile(cpus, vm, turbo)


def _lock(root: Path) -> contextlib.AbstractContextManager[None]:
    """One tune or reset at a time on a host (root/run is tmpfs: the lock leaves nothing)."""
    return exclusive(root / "run/isotax/tune.lock")


def _save_state(state_file: Path, doc: Mapping[str, object]) -> None:
    """Write the state file atomically and durably: it is the only record of the originals."""
    state_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = state_file.with_name(state_file.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, state_file)


def _apply(root: Path, knobs: Sequence[Knob], current: Mapping[str, Reading]) -> list[Result]:
    writes, known = plan(knobs, current)
    done = {r.knob.path: r for r in known}
    done.update({k.path: write_knob(root, k) for k in writes})
    return [done[k.path] for k in knobs]


def tune(root: Path = Path("/"), state_file: Path = DEFAULT_STATE,
         force: bool = False) -> TuneReport:
    """Apply the profile where the host allows it; the previous values are saved to state_file
    before anything is written. TuneError if a state file is already there (unless force:
    then the values now in place become the ones `reset` restores)."""
    with _lock(root):
        if state_file.exists() and not force:
            raise TuneError(
                f"{state_file} exists: the host is already tuned and tuning again would lose "
                "its original values; run `isotax system reset` first (or --force to keep the "
                "current values as the ones to restore)")
        knobs = host_profile(root)
        current = {k.path: read_knob(root, k) for k in knobs}
        saved = [(k, v) for k in knobs if (v := current[k.path][0]) is not None]
        try:
            _save_state(state_file, state_document(root, saved))
        except OSError as e:
            raise TuneError(f"cannot save the current values to {state_file}: {_errtext(e)}; "
                            "nothing was changed (pass --state FILE on a writable path)") from e
        return TuneReport("tune", _apply(root, knobs, current), state_file)


def load_state(state_file: Path) -> list[Knob]:
    try:
        doc = json.loads(state_file.read_text())
    except FileNotFoundError:
        raise TuneError(f"no saved state at {state_file}: nothing to reset (it is written by "
                        "`isotax system tune`; pass --state FILE if it saved elsewhere)"
                        ) from None
    except (OSError, ValueError) as e:
        raise TuneError(f"cannot read {state_file}: {e}; fix or remove it by hand") from e
    try:
        return knobs_from_state(doc if isinstance(doc, dict) else {})
    except ValueError as e:
        raise TuneError(f"{state_file}: {e}; fix or remove it by hand") from e


def reset(root: Path = Path("/"), state_file: Path = DEFAULT_STATE) -> TuneReport:
    """Write back exactly the values saved by `tune` and remove the state file; the file stays
    if a value could not be restored, so a second `reset` can finish."""
    with _lock(root):
        knobs = load_state(state_file)
        current = {k.path: read_knob(root, k) for k in knobs}
        # A knob that disappeared since (a CPU taken offline) cannot be restored: keep the file.
        current = {p: (v, why or ("" if v is not None else f"{p} is gone since tune"))
                   for p, (v, why) in current.items()}
        results = _apply(root, knobs, current)
        report = TuneReport("reset", results, state_file, state_kept=True)
        if report.ok:
            with contextlib.suppress(FileNotFoundError):
                state_file.unlink()
            report.state_kept = False
        return report
