"""The engine's side of commit triggers: which of git's files to watch, and when to look.

A commit moves a branch by rewriting the branch's ref, so the ref files are what is
watched (with watchfiles, through the workspace's ``Watcher``, told not to skip ``.git``):

- ``<common git dir>/refs/heads/<branch>`` (every ``refs/heads`` for ``*``): a loose ref,
  rewritten (lock file, then rename) by ``commit``, ``merge``, ``pull``, ``rebase``'s last
  step, ``commit --amend``, ``reset``, ``branch -f``, ``branch -d``. The *common* git dir,
  because branches are shared by every worktree of a repository: a commit made in another
  worktree rewrites the same file, and a trigger on a linked worktree watches the main one.
- ``<common git dir>/packed-refs``: where ``git gc``/``pack-refs`` move refs; deleting a
  packed branch rewrites it, and so may a fetch or a clone.
- ``<common git dir>/reftable/`` when the repository stores its refs in a reftable
  (git 2.45+): every ref update writes a new table there.

``HEAD`` is not watched: a commit on a branch rewrites the branch's ref even when it is made
through HEAD, and a moved HEAD alone (a checkout) adds no commit to any branch. A per-worktree
git dir (``.git/worktrees/<name>``) holds only that worktree's HEAD, index and bisect refs,
never a branch, for the same reason.

A change of any of these files only says *when* to look; *what* changed is read with git
(``calls.commits.look``) against the tips the trigger remembers, so a change that adds no
commit (``gc``, a checkout, a new lock file) fires nothing, and a burst of ref updates (a
pull, a rebase) fires once per debounce window. Looks at one trigger are serialised; the
first one, made once its watch is in place, catches up on commits made while no engine ran,
or between the trigger's ``add`` and the engine taking it in.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Any

from ..calls import commits
from ..model.errors import ProcessionError
from .ledger import Ledger
from .watch import Watcher

log = logging.getLogger("procession.engine")
#: How soon a look the store refused (busy) is tried again.
RETRY_S = 1.0
#: How often the repositories of watched triggers are checked to be still there: one deleted
#: whole may give its watches no event to report (their folders go with them).
SWEEP_S = 2.0


def watched_files(spec: dict[str, Any]) -> list[str]:
    """The files (and folders) of git whose changes may mean new commits for ``spec``."""
    common = spec["git"]
    heads = os.path.join(common, "refs", "heads")
    paths = [heads if spec["branch"] == "*" else os.path.join(heads, spec["branch"]),
             os.path.join(common, "packed-refs")]
    if os.path.isdir(os.path.join(common, "reftable")):
        paths.append(os.path.join(common, "reftable"))
    return paths


class CommitWatch:
    """Every commit trigger the engine holds: their watches, and the looks they cause."""

    def __init__(self, ledger: Ledger, kick: Callable[[], None]) -> None:
        self.ledger = ledger
        self.kick = kick
        self.specs: dict[int, dict[str, Any]] = {}
        self.gone: set[int] = set()  # triggers whose repository is not there: not watched
        self.watcher = Watcher(self._changed, filtered=False)
        self._locks: dict[int, asyncio.Lock] = {}
        self._looking: set[asyncio.Task[None]] = set()
        self._retries: set[asyncio.TimerHandle] = set()
        self._closed = False
        self._sweeper: asyncio.Task[None] | None = None

    async def _sweep(self) -> None:
        while not self._closed:
            await asyncio.sleep(SWEEP_S)
            for tid, spec in list(self.specs.items()):
                if tid not in self.gone and not os.path.isdir(spec["git"]):
                    self._spawn(tid)

    async def update(self, specs: dict[int, dict[str, Any]], catch_up: bool = False) -> None:
        """Hold exactly these triggers (id -> spec). Those new to the engine (and those whose
        repository was gone) are looked at once their watches are in place."""
        if self._sweeper is None and not self._closed:
            self._sweeper = asyncio.ensure_future(self._sweep())
        fresh = [tid for tid in specs if tid not in self.specs or tid in self.gone]
        self.specs = dict(specs)
        self.gone &= set(specs)
        self.gone |= {tid for tid in fresh if not os.path.isdir(specs[tid]["git"])}
        self._arm()
        await self.watcher.settled()
        for tid in fresh:
            self._spawn(tid, catch_up)

    def _arm(self) -> None:
        self.watcher.update({tid: {"paths": watched_files(spec), "debounce_ms": spec["debounce_ms"]}
                             for tid, spec in self.specs.items() if tid not in self.gone})

    async def _changed(self, tid: int, paths: list[str], more: int) -> None:
        await self.look(tid)

    def _spawn(self, tid: int, catch_up: bool = False) -> None:
        if self._closed:
            return
        task = asyncio.ensure_future(self.look(tid, catch_up))
        self._looking.add(task)
        task.add_done_callback(self._looking.discard)

    async def look(self, tid: int, catch_up: bool = False) -> None:
        """Read what is new for trigger ``tid`` and fire it, or remember what it saw."""
        lock = self._locks.setdefault(tid, asyncio.Lock())
        async with lock:
            try:
                found = await self.ledger.commit_trigger(tid)
                if found is None:
                    return
                spec, seen = found
                state, causes = await asyncio.to_thread(commits.look, spec, seen)
                if catch_up:
                    for cause in causes:
                        cause["catch_up"] = True
                results = await self.ledger.fire_commits(tid, causes, state, seen)
            except ProcessionError as exc:
                log.warning("trigger %d (commit) could not look at its repository (%s); trying again", tid, exc)
                loop = asyncio.get_running_loop()
                self._retries = {h for h in self._retries if h.when() > loop.time()}
                self._retries.add(loop.call_later(RETRY_S, self._spawn, tid, catch_up))
                return
        if state["problem"] and state["problem"] != seen.get("problem"):
            log.warning("trigger %d (commit): %s", tid, state["problem"])
        missing = not os.path.isdir(spec["git"])
        if missing != (tid in self.gone) and tid in self.specs:
            (self.gone.add if missing else self.gone.discard)(tid)
            self._arm()
        if causes:
            log.info("trigger %d (commit) fired: %s", tid, ", ".join(
                f"{c['branch']} +{len(c['commits']) + c.get('more_commits', 0)} ({r})" for c, r in zip(causes, results)))
            self.kick()

    async def close(self) -> None:
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        for handle in self._retries:
            handle.cancel()
        await self.watcher.close()
        if self._looking:
            await asyncio.gather(*self._looking, return_exceptions=True)
