"""A parameter as a plugin declares it: what a workload accepts (its params) and what an
environment kind reads from the plan (its options), checked when the plan is loaded."""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Params = Mapping[str, Any]


@dataclass(frozen=True)
class ParamSpec:
    """One parameter a workload accepts: its type, default and meaning (shown by `workloads`)."""

    name: str
    type: type
    default: Any
    help: str
    minimum: float | None = None
    choices: tuple[Any, ...] | None = None
    maximum: float | None = None  # where the tool itself has a limit (iperf3's 128 streams)
    # Other types a value may have too: an environment's on/off option takes true or "on".
    also: tuple[builtins.type, ...] = ()

    def problem(self, value: Any) -> str | None:
        """What is wrong with a value for this parameter, in the user's words; None if fine."""
        types = (self.type, *self.also)
        # true is no number (bool is an int to Python), and an int is a fine float.
        ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
        if float in types and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            return f"{value!r} should be {' or '.join(t.__name__ for t in types)}"
        if self.minimum is not None and value < self.minimum:
            return f"{value!r} is below {self.minimum:g}"
        if self.maximum is not None and value > self.maximum:
            return f"{value!r} is above {self.maximum:g}"
        if self.choices is not None and value not in self.choices:
            return f"{value!r} is not one of: {', '.join(map(_word, self.choices))}"
        return None


def _word(choice: Any) -> str:
    """A choice as a plan writes it: true and false in TOML's spelling."""
    return str(choice).lower() if isinstance(choice, bool) else str(choice)
