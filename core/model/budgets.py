"""Budgets, like rlimits: what a session (or all of an agent's sessions) may spend in a period.

A limit caps any of: ``tokens`` (input and output tokens its runs reported, cache reads and
writes not counted), ``cost`` (US dollars, as its agent CLI reported a run's cost: Claude Code
and opencode do; a run whose runner reports none counts nothing), ``seconds`` (its runs' running
time, stopped time not counted) and ``runs`` (runs started), ``per`` day, week or month (local
time: from midnight, Monday, the 1st) or in ``total``. At ``WARN`` of any cap the user is told
once a period; at a cap the engine suspends the session (reason ``budget``) before its next run
(a run under way finishes its turn); a raised limit or a new period resumes it.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any, Final

from .errors import InvalidArgument
from .trigger_spec import duration

PERIODS: Final = ("day", "week", "month", "total")
#: The part of a cap at which the user is told, once a period.
WARN: Final = 0.8
CAPS: Final = ("tokens", "cost", "seconds", "runs")
_AMOUNT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgG]?)")
_SCALE = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}


def amount(text: str, what: str) -> float:
    """``2M``, ``500k``, ``1200``: a number with an optional k, M or G."""
    found = _AMOUNT.fullmatch(text.strip())
    if found is None:
        raise InvalidArgument(f"bad {what} {text!r}: use forms like 500k, 2M, 1200")
    return float(found.group(1)) * _SCALE[found.group(2).lower()]


def seconds(text: str) -> float:
    """A running time: ``90m``, ``2h``, ``1d``."""
    return duration(text)


def period(per: str) -> str:
    if per not in PERIODS:
        raise InvalidArgument(f"--per takes {', '.join(PERIODS)}, not {per!r}")
    return per


def period_start(per: str, now: float) -> float:
    """When the period holding ``now`` began (local time); 0 for ``total``."""
    if per == "total":
        return 0.0
    day = dt.datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)
    if per == "week":
        day -= dt.timedelta(days=day.weekday())
    elif per == "month":
        day = day.replace(day=1)
    return day.timestamp()


def period_end(per: str, now: float) -> float | None:
    """When the period holding ``now`` ends (None: ``total`` never does)."""
    if per == "total":
        return None
    start = dt.datetime.fromtimestamp(period_start(per, now))
    if per == "day":
        end = start + dt.timedelta(days=1)
    elif per == "week":
        end = start + dt.timedelta(days=7)
    else:
        end = (start.replace(day=28) + dt.timedelta(days=4)).replace(day=1)
    return end.timestamp()


@dataclass(slots=True, frozen=True)
class Spend:
    """What was spent in the period, against the caps (None: no cap)."""

    tokens: int
    cost: float
    seconds: float
    runs: int

    def used(self, caps: dict[str, Any]) -> dict[str, float]:
        """Each capped figure's part of its cap (1.0: the cap reached; a cap of 0 is always reached)."""
        return {k: getattr(self, k) / caps[k] if caps[k] > 0 else float("inf") for k in CAPS
                if caps.get(k) is not None}
