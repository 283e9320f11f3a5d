"""The engine's lease, kept alive on a thread of its own.

One engine runs a workspace: the one whose token is in the lease row. Its heartbeat must not
depend on the rest of the engine's work: a busy event loop (recomputing many timers, say)
must never look like a dead engine to a second ``procession run``, which would then take the
lease and kill the first one's steps. So the heartbeat is a thread with its own SQLite
connection, renewing the lease every ``HEARTBEAT_S``; it stops the engine (``on_lost``) the
moment it finds the lease taken, and keeps trying while the workspace is only busy.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from ..store import is_url, schema
from ..store.beat import Beat, beat_errors, open_beat

log = logging.getLogger("procession.engine")

HEARTBEAT_S = 1.0


class Heartbeat(threading.Thread):
    """Renews the lease every beat, and looks at the workspace's schema: an engine whose lease
    is gone, or whose workspace a newer Procession upgraded (``procession upgrade``: its tables
    no longer fit this one's statements), is told why (``on_lost``) and stops."""

    def __init__(self, path: Path | str, token: str, on_lost: Callable[[str], object], busy_ms: int = 5_000) -> None:
        super().__init__(name="procession-heartbeat", daemon=True)
        self.path, self.token, self.on_lost, self.busy_ms = path, token, on_lost, busy_ms
        self.stopped = threading.Event()
        self.beats = 0

    def run(self) -> None:
        # opened at once: a connection opened later to a workspace file moved away meanwhile
        # would make a new, empty file there (a database's is opened again when it drops)
        beat: Beat | None = None
        failing = ""  # what the last beat could not do (said once, and once more when it can again)
        with contextlib.suppress(*beat_errors(self.path)):
            beat = open_beat(self.path, self.busy_ms)
        try:
            while not self.stopped.wait(HEARTBEAT_S):
                try:
                    if beat is None:
                        beat = open_beat(self.path, self.busy_ms)
                    renewed = beat.renew(self.token)
                    found = beat.schema() if renewed else schema.VERSION
                except beat_errors(self.path) as exc:  # busy, failing or out of reach: the next beat tries again
                    if beat is not None and is_url(self.path) and beat.broken():
                        beat.close()
                        beat = None
                    if str(exc) != failing:
                        log.warning("heartbeat: the lease is not renewed (%s); trying every %g s", exc, HEARTBEAT_S)
                        failing = str(exc)
                    continue
                if failing:
                    log.warning("heartbeat: the lease is renewed again")
                    failing = ""
                if not renewed:
                    self.on_lost("this engine's lease is gone (declared dead, or taken by another engine)")
                    return
                if found > schema.VERSION:
                    self.on_lost(f"the workspace was upgraded to schema {found} by a newer Procession (this one knows up"
                                 f" to {schema.VERSION}): start the newer one")
                    return
                self.beats += 1
        finally:
            if beat is not None:
                beat.close()

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=HEARTBEAT_S * 3)
