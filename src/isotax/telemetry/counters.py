"""Host-wide CPU accounting around a measurement: what a unit of work costs the whole machine.

IBM's study ran `perf stat -a` around each network test and divided cycles by bytes moved.
isotax does the same where the machine can count cycles (perf_cycles_supported() tries a
short real `perf stat -a -e cycles`), and always also reads the kernel's own CPU time
accounting in /proc/stat before and after, reporting CPU seconds split the way the kernel
splits them. Hardware cycle counters need a PMU; where the host has none (a VM such as this
Firecracker guest: /sys/bus/event_source/devices/cpu is missing, perf says `<not supported>`)
/proc/stat is the only method, and cpu_method() says so and why. Host-wide is the point: it
counts the work done on an environment's behalf outside it -- QEMU's device emulation and
TCG threads, softirq in the bridge and NAT -- which an environment's own accounting hides.
"""

from __future__ import annotations

import functools
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from isotax.host import command, owners
from isotax.model import SanityError
from isotax.parsers import procfs
from isotax.parsers.perf_stat import find_counter, parse_perf_stat

PROC_STAT = Path("/proc/stat")
PMU_DIR = Path("/sys/bus/event_source/devices/cpu")


@dataclass(frozen=True)
class CpuTimes:
    """Host-wide CPU seconds by kind (all CPUs together), from one /proc/stat reading."""

    user: float  # user + nice (includes guest time: QEMU's KVM vCPUs)
    system: float
    irq: float
    softirq: float
    idle: float  # idle + iowait
    steal: float  # time a hypervisor under this host ran something else

    @property
    def busy(self) -> float:
        return self.user + self.system + self.irq + self.softirq

    def __sub__(self, other: CpuTimes) -> CpuTimes:
        return CpuTimes(self.user - other.user, self.system - other.system,
                        self.irq - other.irq, self.softirq - other.softirq,
                        self.idle - other.idle, self.steal - other.steal)


def parse_proc_stat(text: str, ticks_per_s: float = 100.0) -> CpuTimes:
    """The aggregate `cpu` line of /proc/stat text, in seconds. Pure."""
    try:
        total = procfs.parse_stat(text).total
    except ValueError:
        total = None
    if total is None:
        raise ValueError("no aggregate 'cpu' line in /proc/stat")
    f = dict(zip(procfs.STAT_COLUMNS, total, strict=True))
    t = ticks_per_s
    return CpuTimes(
        user=(f["user"] + f["nice"]) / t, system=f["system"] / t, irq=f["irq"] / t,
        softirq=f["softirq"] / t, idle=(f["idle"] + f["iowait"]) / t,
        steal=f["steal"] / t)


def read_cpu_times() -> CpuTimes:
    return parse_proc_stat(PROC_STAT.read_text(), float(os.sysconf("SC_CLK_TCK")))


PARANOID = Path("/proc/sys/kernel/perf_event_paranoid")
_PERF_START_S = 10.0  # perf opening its counters and acknowledging "enable"
_PERF_STOP_S = 10.0  # perf writing its counts after SIGINT


def _paranoid() -> str:
    try:
        return PARANOID.read_text().strip()
    except OSError:
        return "unknown"


def _perf_failure(rc: int, stderr: str) -> str:
    """Why a perf stat run gave no counts, in one line."""
    if "perf_event_paranoid" in stderr or "Access to performance monitoring" in stderr:
        return (f"no permission to count host-wide (perf_event_paranoid={_paranoid()}; "
                "run as root)")
    first = next((ln.strip() for ln in stderr.splitlines() if ln.strip()), "no message")
    return f"perf stat failed (exit {rc}): {first[:160]}"


def _counter_reason(text: str, event: str) -> tuple[float | None, str]:
    """The value of `event` in perf stat -x, output, or None and why not."""
    try:
        c = find_counter(parse_perf_stat(text), event)
    except SanityError as e:
        return None, str(e)
    if c is None:
        return None, f"perf stat printed no {event} counter"
    if c.value is None:
        why = f"{c.event} <{c.status}>"
        if c.status == "not supported" and not PMU_DIR.is_dir():
            why += f" (no hardware PMU: no {PMU_DIR})"
        return None, why
    if c.event != event:
        # perf quietly drops to cycles:u when it may not count the kernel: not host-wide.
        return None, (f"only {c.event} allowed: no permission for kernel counts "
                      f"(perf_event_paranoid={_paranoid()}; run as root)")
    return c.value, "counted"


@functools.cache
def perf_cycles_supported() -> tuple[bool, str]:
    """Whether host-wide `perf stat -a -e cycles` gives a number here (a short real run), and
    why not: perf missing, cycles not supported (no PMU), or no permission. Cached per
    process: the answer does not change while isotax runs."""
    perf = shutil.which("perf")
    if perf is None:
        return False, "perf is not installed (apt-get install linux-perf)"
    with tempfile.TemporaryDirectory(prefix=owners.temp_prefix("perf")) as d:
        out = Path(d) / "stat.csv"
        done = command.run(
            [perf, "stat", "-x,", "-a", "-e", "cycles", "-o", str(out), "--", "sleep", "0.05"],
            30)
        if done.returncode in (command.TIMED_OUT, command.NOT_FOUND):
            return False, f"perf stat could not run: {done.stderr.strip()}"
        if done.returncode != 0:
            return False, _perf_failure(done.returncode, done.stderr)
        value, why = _counter_reason(out.read_text() if out.exists() else "", "cycles")
    return (True, "perf cycles") if value is not None else (False, why)


def cpu_method() -> str:
    """Which CPU-cost method isotax uses on this host, and why, in words for the report:
    "perf cycles" (with /proc/stat beside it) or "/proc/stat (perf: <why not>)"."""
    ok, reason = perf_cycles_supported()
    return "perf cycles" if ok else f"/proc/stat (perf: {reason})"


@dataclass
class PerfReading:
    """What a background perf stat counted; filled in when its `with` block ends."""

    event: str
    value: float | None = None  # None: nothing counted, see reason
    reason: str = "not measured yet"
    raw: str = ""  # perf's -x, output, for callers that counted several events
    pid: int = 0  # perf's own PID while it runs (so telemetry can tell it from the workload)


Hook = Callable[[PerfReading], None]


def _nothing(reading: PerfReading) -> None:
    return None


@contextmanager
def perf_counting(event: str, starting: Hook = _nothing,
                  stopping: Hook = _nothing) -> Iterator[PerfReading]:
    """Count `event` host-wide (perf stat -a) exactly around the body of the `with`.

    perf starts before the body with its counters disabled (-D -1) and is enabled through its
    control FIFO, waiting for perf's "ack", so the count starts when the body does, not when
    perf happens to finish opening counters; after the body it is stopped with SIGINT by its
    PID and its -x, output parsed. A failure never raises: the reading says why it is empty.

    `starting` runs while perf opens its counters (after it was started, before counting, its
    PID in the reading), `stopping` while perf writes its counts (after SIGINT ended the
    count): the caller's own work at both ends overlaps perf's start and stop instead of
    adding to them, and is not counted. Both run whether perf can count or not.
    """
    reading = PerfReading(event)
    perf = shutil.which("perf")
    if perf is None:
        reading.reason = "perf is not installed (apt-get install linux-perf)"
        starting(reading)
        try:
            yield reading
        finally:
            stopping(reading)
        return
    with tempfile.TemporaryDirectory(prefix=owners.temp_prefix("perf")) as d:
        ctl, ack, out, err = (Path(d) / n for n in ("ctl", "ack", "stat.csv", "stderr"))
        os.mkfifo(ctl)
        os.mkfifo(ack)
        # Both ends opened before perf starts and without blocking: a perf that dies early
        # cannot leave isotax hanging in open().
        ctl_fd = os.open(ctl, os.O_RDWR)
        ack_fd = os.open(ack, os.O_RDONLY | os.O_NONBLOCK)
        proc: subprocess.Popen[bytes] | None = None
        started = False
        try:
            try:
                with err.open("wb") as errf:
                    # Own session: a terminal's Ctrl-C reaches isotax, which stops perf itself.
                    proc = subprocess.Popen(
                        [*dies_with_parent(), perf, "stat", "-x,", "-a", "-e", event, "-D", "-1",
                         "--control", f"fifo:{ctl},{ack}", "-o", str(out)],
                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errf,
                        start_new_session=True)
            except OSError as e:
                reading.reason = f"perf stat could not run: {e}"
            if proc is not None:
                reading.pid = proc.pid
            starting(reading)
            if proc is not None:
                os.write(ctl_fd, b"enable\n")
                started = _wait_ack(ack_fd, proc)
                if not started:
                    reading.reason = "perf stat did not start counting"
            yield reading
        finally:
            signalled = proc is not None and proc.poll() is None
            if proc is not None and signalled:
                proc.send_signal(signal.SIGINT)  # the count ends with the body
            try:
                stopping(reading)
            finally:
                if proc is not None:
                    _stop(proc, signalled)
                os.close(ctl_fd)
                os.close(ack_fd)
        if proc is None:
            return
        if not started:
            if proc.returncode not in (0, -signal.SIGINT, 128 + signal.SIGINT):
                reading.reason = _perf_failure(proc.returncode, err.read_text(errors="replace"))
            return
        reading.raw = out.read_text() if out.exists() else ""
        reading.value, reading.reason = _counter_reason(reading.raw, event)


@functools.cache
def dies_with_parent() -> tuple[str, ...]:
    """A wrapper that makes the command it runs get SIGKILL when isotax dies (setpriv
    --pdeathsig, util-linux): a system-wide perf stat counts until someone stops it, and an
    isotax killed with SIGKILL cannot. Empty where setpriv is missing (crash recovery still
    finds perf by its owner, ISOTAX_OWNER in its environment)."""
    setpriv = shutil.which("setpriv")
    return (setpriv, "--pdeathsig", "KILL", "--") if setpriv else ()


def _wait_ack(ack_fd: int, proc: subprocess.Popen[bytes]) -> bool:
    """True once perf acknowledged "enable"; False if it exited or took too long."""
    deadline = time.monotonic() + _PERF_START_S
    got = b""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        ready, _, _ = select.select([ack_fd], [], [], 0.05)
        if ready:
            try:
                chunk = os.read(ack_fd, 64)
            except BlockingIOError:
                chunk = b""
            if not chunk:  # no writer yet (EOF on a FIFO): perf has not opened it
                time.sleep(0.01)
            got += chunk
            if b"ack" in got:
                return True
    return False


def _stop(proc: subprocess.Popen[bytes], signalled: bool = False) -> None:
    """SIGINT (unless `signalled` already) makes perf stat write its counts and exit; kill
    only if it does not."""
    if proc.poll() is None:
        if not signalled:
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(_PERF_STOP_S)
        except subprocess.TimeoutExpired:
            command.kill_group(proc)  # started in its own session
            proc.wait()


@contextmanager
def perf_cycles() -> Iterator[PerfReading]:
    """Host-wide cycles around the `with` body where perf_cycles_supported(); otherwise
    nothing runs and the reading's value stays None with the reason."""
    ok, reason = perf_cycles_supported()
    if not ok:
        yield PerfReading("cycles", None, reason)
        return
    with perf_counting("cycles") as reading:
        yield reading


def cost_per_gb(delta: CpuTimes, nbytes: float) -> dict[str, float]:
    """Host-wide CPU seconds per GB (1e9 bytes) moved, by kind: user, system (with hardirq),
    softirq, and their total."""
    if nbytes <= 0:
        raise ValueError("no bytes moved: CPU cost per GB is undefined")
    gb = nbytes / 1e9
    return {
        "user": delta.user / gb,
        "system": (delta.system + delta.irq) / gb,
        "softirq": delta.softirq / gb,
        "total": delta.busy / gb,
    }
