"""One file watcher for every watch trigger of a workspace.

``Watcher`` runs one ``watchfiles`` watch over the smallest set of folders that covers every
armed trigger (plus, non-recursively, the folders of watched single files, so that a file
replaced by an editor is still seen), matches each change only against the triggers whose
folder holds it, and fires each trigger once per debounce window with every path that
changed in it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..calls.watched import compile_pattern, root

log = logging.getLogger("procession.engine")

#: Paths one firing hands to the run; the cause says how many more there were.
PATHS_PER_FIRING = 1_000


@dataclass(slots=True)
class _Watched:
    paths: list[str]
    regexes: list[re.Pattern[str]]
    debounce: float


Fire = Callable[[int, list[str], int], Awaitable[None]]


class Watcher:
    """One file watcher for all watch triggers of a workspace."""

    def __init__(self, fire: Fire, *, filtered: bool = True) -> None:
        self.fire = fire
        self.filtered = filtered  # False: see every change, even in folders watchfiles ignores (.git)
        self.watched: dict[int, _Watched] = {}
        self.by_root: dict[str, list[int]] = {}
        self.pending: dict[int, set[str]] = {}
        self.dropped: dict[int, int] = {}
        self.timers: dict[int, asyncio.TimerHandle] = {}
        self._roots: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())
        self._stop: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._firing: set[asyncio.Task[None]] = set()

    def update(self, specs: dict[int, dict[str, Any]]) -> None:
        """Watch exactly these triggers (id -> spec); restarts the watch if its folders change."""
        self.watched.clear()
        self.by_root.clear()
        deep: set[str] = set()
        flat: set[str] = set()
        for tid, spec in specs.items():
            for pattern in spec["paths"]:
                folder, recursive = root(pattern)
                (deep if recursive else flat).add(str(folder))
                self.by_root.setdefault(str(folder), []).append(tid)
            self.watched[tid] = _Watched(spec["paths"], [compile_pattern(p) for p in spec["paths"]],
                                         spec.get("debounce_ms", 500) / 1000)
        for tid in list(self.pending):
            if tid not in self.watched:
                self.pending.pop(tid, None)
                timer = self.timers.pop(tid, None)
                if timer:
                    timer.cancel()
        deep = _outermost(deep)
        flat = {f for f in flat if not any(_within(f, d) for d in deep)}
        roots = (frozenset(deep), frozenset(flat))
        if roots != self._roots:
            self._roots = roots
            self._restart()

    def _restart(self) -> None:
        if self._stop is not None:
            self._stop.set()
        self._stop = asyncio.Event()
        deep, flat = self._roots
        self._tasks = [t for t in self._tasks if not t.done()]
        if deep:
            self._tasks.append(asyncio.ensure_future(self._watch(sorted(deep), True, self._stop)))
        if flat:
            self._tasks.append(asyncio.ensure_future(self._watch(sorted(flat), False, self._stop)))

    async def _watch(self, roots: list[str], recursive: bool, stop: asyncio.Event) -> None:
        from watchfiles import awatch

        while not stop.is_set():
            try:
                options: dict[str, Any] = {} if self.filtered else {"watch_filter": None}
                async for changes in awatch(*roots, debounce=50, step=10, stop_event=stop, recursive=recursive,
                                            ignore_permission_denied=True, **options):
                    self.dispatch(path for _, path in changes)
            except (FileNotFoundError, RuntimeError, OSError) as exc:
                log.warning("watch on %s stopped (%s); retrying", ", ".join(roots), exc)
                try:
                    await asyncio.wait_for(stop.wait(), 1.0)
                except asyncio.TimeoutError:
                    continue

    async def settled(self) -> None:
        """Return once the watches ``update`` asked for are in place: from then on no change of
        their files is missed. Each watch task sets its watches up in its first step — watchfiles'
        ``awatch`` makes its ``RustNotify`` (which registers every watch, and queues events from
        then on) before its first ``await`` — and that step runs before this one resumes."""
        await asyncio.sleep(0)

    def dispatch(self, paths: Iterable[str]) -> None:
        """Match changed paths to triggers (only those whose folder holds the path)."""
        loop = asyncio.get_running_loop()
        for path in paths:
            candidates: set[int] = set()
            folder = path
            while True:
                candidates.update(self.by_root.get(folder, ()))
                parent = os.path.dirname(folder)
                if parent == folder:
                    break
                folder = parent
            for tid in candidates:
                watched = self.watched[tid]
                if not any(r.match(path) for r in watched.regexes):
                    continue
                bucket = self.pending.setdefault(tid, set())
                if len(bucket) < PATHS_PER_FIRING:
                    bucket.add(path)
                elif path not in bucket:
                    self.dropped[tid] = self.dropped.get(tid, 0) + 1
                if tid not in self.timers:
                    self.timers[tid] = loop.call_later(watched.debounce, self._expire, tid)

    def _expire(self, tid: int) -> None:
        self.timers.pop(tid, None)
        paths = sorted(self.pending.pop(tid, ()))
        more = self.dropped.pop(tid, 0)
        if paths:
            task = asyncio.ensure_future(self.fire(tid, paths, more))
            self._firing.add(task)
            task.add_done_callback(self._firing.discard)

    async def close(self) -> None:
        if self._stop is not None:
            self._stop.set()
        for timer in self.timers.values():
            timer.cancel()
        self.timers.clear()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._firing:
            await asyncio.gather(*self._firing, return_exceptions=True)


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _outermost(folders: set[str]) -> set[str]:
    return {f for f in folders if not any(f != g and _within(f, g) for g in folders)}
