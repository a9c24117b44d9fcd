"""One reader per /proc, /sys and cgroup text format. Pure: text in, values out.

Each format the kernel writes is parsed here and only here; the modules that read the files
(telemetry, host, environments, the image build, the leak finder) call these and keep only
what the values mean to them. Every parser is tested on a capture of the real file
(tests/data/proc, tests/data/telemetry, ...). A text that is not the format raises ValueError.

  /proc/stat                    parse_stat        clock ticks per CPU and in all, ctxt, intr
  /proc/PID/stat (and TID)      parse_pid_stat    name, state, ppid, CPU ticks, start time
  /proc/PID/cmdline             parse_cmdline     the arguments
  /proc/PID/cgroup              parse_pid_cgroup  a v1 controller's path, the v2 path
  /proc/meminfo                 parse_meminfo     every field, kB turned into bytes
  /proc/PID/mountinfo           parse_mountinfo   mount point, root, type, source, options
  cpu lists (/sys .../cpulist,
    .../online, cpuset.cpus)    parse_cpulist     "0-3,8" -> [0, 1, 2, 3, 8]
  cgroup.procs                  parse_pids        the member pids
  sysfs selectors               parse_selected    "always [madvise] never" -> "madvise"
The /proc/cpuinfo reader is isotax.parsers.cpuinfo.
"""

from __future__ import annotations

from dataclasses import dataclass

# The columns of a cpu line of /proc/stat, in order (proc(5)). guest and guest_nice are
# already included in user and nice.
STAT_COLUMNS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest",
                "guest_nice")


@dataclass(frozen=True)
class Stat:
    """One /proc/stat, in clock ticks (USER_HZ); every cpu line padded to STAT_COLUMNS."""

    total: tuple[int, ...] | None  # the aggregate `cpu` line; None where the text has none
    cpus: dict[str, tuple[int, ...]]  # "cpu0", "cpu1", ... in the order listed
    ctxt: int  # context switches since boot (0 where the line is missing)
    intr: int  # interrupts since boot (0 where the line is missing)


def parse_stat(text: str) -> Stat:
    """/proc/stat (the host's, a guest's, gVisor's) -> ticks per CPU and in all."""
    total: tuple[int, ...] | None = None
    cpus: dict[str, tuple[int, ...]] = {}
    ctxt = intr = 0
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0].startswith("cpu"):
            vals = tuple(int(x) for x in parts[1:1 + len(STAT_COLUMNS)])
            vals += (0,) * (len(STAT_COLUMNS) - len(vals))
            if parts[0] == "cpu":
                total = vals
            else:
                cpus[parts[0]] = vals
        elif parts[0] == "ctxt":
            ctxt = int(parts[1])
        elif parts[0] == "intr":
            intr = int(parts[1])
    if total is None and not cpus:
        raise ValueError("no cpu lines: not the text of /proc/stat")
    return Stat(total, cpus, ctxt, intr)


@dataclass(frozen=True)
class PidStat:
    """The fields of /proc/PID/stat (or /proc/PID/task/TID/stat) that isotax uses; CPU times
    in clock ticks."""

    name: str  # comm: may hold spaces and parentheses
    state: str  # "R", "S", "Z", ...
    ppid: int
    utime: int
    stime: int
    cutime: int  # reaped children's user time
    cstime: int
    starttime: int  # ticks after boot: tells a reused PID from the process seen before

    @property
    def own(self) -> int:
        """The process's own CPU time (all its threads; a thread's: its own), without reaped
        children."""
        return self.utime + self.stime


def parse_pid_stat(text: str) -> PidStat:
    """/proc/PID/stat text -> PidStat (proc(5) fields 2-4, 14-17 and 22). The command name may
    hold spaces and parentheses: fields are counted after the last ')'."""
    try:
        name = text[text.index("(") + 1:text.rindex(")")]
        rest = text[text.rindex(")") + 2:].split()
        # rest[0] is field 3 (state): field n is rest[n - 3].
        return PidStat(name, rest[0], int(rest[1]), int(rest[11]), int(rest[12]),
                       int(rest[13]), int(rest[14]), int(rest[19]))
    except (IndexError, ValueError) as e:
        raise ValueError(f"not a /proc/PID/stat line: {text[:80]!r}") from e


def parse_cmdline(raw: bytes) -> list[str]:
    """/proc/PID/cmdline (NUL-separated) -> the non-empty arguments; [] for a kernel thread
    or a zombie."""
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def parse_pid_cgroup(text: str, controller: str) -> tuple[str | None, str | None]:
    """(the v1 path of `controller`, the path of the v2 hierarchy "0::") from /proc/PID/cgroup
    text; None for what it lacks."""
    v1 = v2 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if controller in parts[1].split(","):
            v1 = parts[2]
        elif parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
    return v1, v2


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo -> {field: value}: bytes for the fields in kB, counts for the others
    (HugePages_Total, HugePages_Free, ...)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        parts = rest.split()
        if not sep or not parts or not parts[0].isdigit():
            continue
        out[name.strip()] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    if not out:
        raise ValueError("no fields: not the text of /proc/meminfo")
    return out


@dataclass(frozen=True)
class Mount:
    """One line of /proc/PID/mountinfo (proc(5)); paths with their octal escapes undone."""

    root: str  # the path within the filesystem that is mounted (a bind mount's source)
    point: str  # where it is mounted
    options: str  # per-mount options ("rw,relatime")
    fstype: str  # "" where the line has no " - " part
    source: str  # "" where the line has no source


def _unescape(path: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal (\040).
    return path.encode().decode("unicode_escape")


def parse_mountinfo(text: str) -> list[Mount]:
    """/proc/PID/mountinfo -> its mounts, in the order listed (a later one is on top)."""
    out = []
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5:
            continue
        out.append(Mount(_unescape(fields[3]), _unescape(fields[4]),
                         fields[5] if len(fields) > 5 else "",
                         tail[0] if tail else "", tail[1] if len(tail) > 1 else ""))
    return out


def parse_cpulist(text: str) -> list[int]:
    """A kernel CPU list ("0-3,8,10-11", as in cpulist, online, cpuset.cpus) -> [0, 1, 2, 3,
    8, 10, 11]; "" -> []."""
    out: list[int] = []
    for part in text.replace(" ", "").strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"CPU list {text!r} is not like \"0,1\" or \"0-3\"")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def parse_pids(text: str) -> list[int]:
    """cgroup.procs (or cgroup.threads) -> the pids in it."""
    return [int(x) for x in text.split()]


def parse_selected(text: str) -> str | None:
    """The bracketed choice of a sysfs selector ("always [madvise] never" -> "madvise", as in
    transparent_hugepage/enabled, a disk's queue/scheduler); None where none is bracketed."""
    if "[" not in text or "]" not in text:
        return None
    return text[text.index("[") + 1:text.index("]")] or None
