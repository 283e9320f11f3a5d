"""The engine's side of triggers: timers for cron and interval triggers, the file watcher for
watch triggers, the watch of git's refs for commit triggers (``gitwatch``), kept up to date
incrementally.

Every change of a trigger (added, removed, armed, fired) stamps its session's revision, so on
each change of the store the engine reads again only the triggers of the sessions changed
since it last looked, and recomputes the next due time of those alone: a workspace with ten
thousand cron triggers costs the croniter work once, at start, not at every call. Catch-up
(watched files that changed, cron times that passed while no engine ran) happens once, at
start, with the folders scanned on a worker thread; a commit trigger catches up on commits
made meanwhile the same way.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..calls import watched
from .gitwatch import CommitWatch
from .ledger import Ledger
from .watch import PATHS_PER_FIRING, Watcher

log = logging.getLogger("procession.engine")


def next_due(kind: str, spec: dict[str, Any], base: float) -> float:
    """When a cron or interval trigger is next due after ``base`` (local time zone)."""
    if kind == "every":
        return base + float(spec["seconds"])
    from croniter import croniter

    start = datetime.datetime.fromtimestamp(base).astimezone()
    return float(croniter(spec["expr"], start).get_next(float))


class Triggers:
    """What may fire, and when: ``due`` (timers) and the watcher's triggers."""

    def __init__(self, ledger: Ledger, fired: Callable[[int, list[str], int], Awaitable[None]],
                 watch: bool = True, kick: Callable[[], None] = lambda: None) -> None:
        self.ledger = ledger
        self.rev = 0
        self.due: dict[int, tuple[float, str, int]] = {}  # trigger -> (when, kind, session)
        self.watched: dict[int, dict[str, Any]] = {}  # trigger -> spec
        self.of_session: dict[int, set[int]] = {}  # session -> its triggers we hold
        self.watcher = Watcher(fired) if watch else None
        self.commits = CommitWatch(ledger, kick) if watch else None
        self.committed: dict[int, dict[str, Any]] = {}  # commit trigger -> spec

    async def refresh(self, catch_up: bool = False) -> None:
        """Take in the triggers of the sessions changed since the last refresh."""
        rev, sessions, found = await self.ledger.trigger_changes(self.rev)
        self.rev = rev
        watch_changed = commit_changed = False
        for sid in sessions:
            for tid in self.of_session.pop(sid, ()):
                self.due.pop(tid, None)
                watch_changed |= self.watched.pop(tid, None) is not None
                commit_changed |= self.committed.pop(tid, None) is not None
        for row in found:
            spec = json.loads(row["spec"])
            self.of_session.setdefault(row["session_id"], set()).add(row["id"])
            if row["kind"] == "watch":
                self.watched[row["id"]] = spec
                watch_changed = True
                if catch_up:
                    await self._catch_up(row, spec)
            elif row["kind"] == "commit":
                self.committed[row["id"]] = spec
                commit_changed = True
            elif row["kind"] in ("cron", "every"):
                base = row["last_fired"] or row["created"]
                self.due[row["id"]] = (next_due(row["kind"], spec, base), row["kind"], row["session_id"])
        if watch_changed and self.watcher is not None:
            self.watcher.update(self.watched)
        if (commit_changed or catch_up) and self.commits is not None:
            await self.commits.update(self.committed, catch_up)

    async def _catch_up(self, row: Any, spec: dict[str, Any]) -> None:
        """Fire once if the watched files changed while no engine ran."""
        now = await asyncio.to_thread(watched.scan, spec["paths"])
        before = json.loads(row["state"]) if row["state"] else None
        paths = watched.changed(before, now)
        if before is None:
            await self.ledger.remember(row["id"], now)
        elif paths is not None:
            result = await self.ledger.fire(row["id"], {"paths": paths[:PATHS_PER_FIRING], "catch_up": True},
                                            state=now)
            log.info("trigger %d (watch) caught up: files changed while no engine ran: %s", row["id"], result)

    def next(self) -> float | None:
        return min((d for d, _, _ in self.due.values()), default=None)

    async def fire_due(self, only: set[int] | None = None) -> bool:
        """Fire the timers that are due; whether any fired."""
        now = time.time()
        fired = False
        for tid, (when, kind, sid) in list(self.due.items()):
            if when > now or (only is not None and sid not in only):
                continue
            cause: dict[str, Any] = {"due": when}
            if now - when > 60:
                cause["catch_up"] = True
            result = await self.ledger.fire(tid, cause)
            log.info("trigger %d (%s) fired for session %d: %s", tid, kind, sid, result)
            self.due.pop(tid)
            fired = True
        return fired

    async def close(self) -> None:
        if self.watcher is not None:
            await self.watcher.close()
        if self.commits is not None:
            await self.commits.close()
