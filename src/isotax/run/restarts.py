"""An environment that dies mid-run (QEMU killed, the gVisor sandbox gone, dockerd stopped):
the runner's bookkeeping of it, pure, so the rules are tested without killing anything.

The cell it died in (or the one about to run when its resume failed) fails with "environment
died: <why>"; one that died while paused, between its cells, fails none. The dead instance is
stopped at once; the environment's next cell starts a new instance first (none is started when
no cell of it is left). An environment is restarted at
most the plan's `restarts` times; past that, or when a restart fails, every remaining cell of
it fails with the reason, without running. Each death is recorded with the run (run meta
"restarts": one entry per death, its outcome filled in when the next cell comes), and the report
warns about it (analysis.report_data).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

META_KEY = "restarts"  # store.put_run_meta key: a list of Death.as_meta()
NOT_NEEDED = "not restarted: none of its cells was left"


def died_reason(why: str) -> str:
    """The reason stored with the cell an environment died in."""
    return f"environment died: {why}"


def times(n: int) -> str:
    return "once" if n == 1 else "twice" if n == 2 else f"{n} times"


@dataclass
class Death:
    environment: str
    cell: str  # the cell it died in or before, in words ("" when it died between cells)
    why: str  # Instance.alive()'s words, or the failing pause/resume's
    at: float  # time.time()
    outcome: str = NOT_NEEDED  # "restarted", "restart failed: ...", "given up: ..."
    restart_s: float | None = None  # how long the new instance took to start

    def as_meta(self) -> dict[str, Any]:
        return asdict(self)


class Restarts:
    """Per environment: whether it is dead now, how often it died and was restarted, and why
    its remaining cells fail when it was given up."""

    def __init__(self, allowed: int, earlier: Sequence[Mapping[str, Any]] = ()) -> None:
        self.allowed = allowed  # the plan's `restarts`
        self.earlier = [dict(d) for d in earlier]  # a resumed run's records, kept as they are
        self.deaths: list[Death] = []
        self._dead: dict[str, Death] = {}  # died, not restarted yet
        self._restarts: dict[str, int] = {}
        self._given_up: dict[str, str] = {}

    def died(self, environment: str, cell: str, why: str, at: float) -> str:
        """Record a death; returns the reason the cell it died in fails with."""
        d = Death(environment, cell, why, at)
        self.deaths.append(d)
        self._dead[environment] = d
        return died_reason(why)

    def dead(self, environment: str) -> str:
        """Why the environment is dead and waits for a restart; "" when it is not."""
        d = self._dead.get(environment)
        return d.why if d is not None else ""

    def given_up(self, environment: str) -> str:
        """The reason every remaining cell of a given-up environment fails with; "" if not."""
        return self._given_up.get(environment, "")

    def deaths_of(self, environment: str) -> int:
        return sum(d.environment == environment for d in self.deaths)

    def restarts_of(self, environment: str) -> int:
        return self._restarts.get(environment, 0)

    def may_restart(self, environment: str) -> bool:
        """A dead environment may start again: restarts left. Without any left it is given up
        here (given_up() says why from now on)."""
        if environment not in self._dead:
            return False
        if self.restarts_of(environment) < self.allowed:
            return True
        n, last = self.deaths_of(environment), self._dead[environment].why
        self._give_up(environment, f"environment died {times(n)} (the plan allows "
                                   f"{self.allowed} restart{'' if self.allowed == 1 else 's'}); "
                                   f"last: {last}", "given up: no restarts left")
        return False

    def restarted(self, environment: str, seconds: float) -> None:
        d = self._dead.pop(environment)
        self._restarts[environment] = self.restarts_of(environment) + 1
        d.outcome, d.restart_s = "restarted", round(seconds, 2)

    def restart_failed(self, environment: str, error: str) -> None:
        n, last = self.deaths_of(environment), self._dead[environment].why
        self._give_up(environment, f"environment died {times(n)} and could not be restarted "
                                   f"({error}); last: {last}", f"restart failed: {error}")

    def _give_up(self, environment: str, reason: str, outcome: str) -> None:
        d = self._dead.pop(environment)
        d.outcome = outcome
        self._given_up[environment] = reason

    def meta(self) -> list[dict[str, Any]]:
        """What the store keeps under META_KEY: the earlier records, then this run's."""
        return [*self.earlier, *(d.as_meta() for d in self.deaths)]

