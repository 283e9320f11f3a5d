"""The engine's lease, kept alive on a thread of its own.

One engine runs a workspace: the one whose token is in the lease row. Its heartbeat must not
depend on the rest of the engine's work: a busy event loop (recomputing many timers, say)
must never look like a dead engine to a second ``procession run``, which would then take the
lease and kill the first one's steps. So the heartbeat is a thread with its own SQLite
connection, renewing the lease every ``HEARTBEAT_S``; it stops the engine (``on_lost``) the
moment it finds the lease taken, and keeps trying while the workspace is only busy.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("procession.engine")

HEARTBEAT_S = 1.0


class Heartbeat(threading.Thread):
    def __init__(self, path: Path, token: str, on_lost: Callable[[], object], busy_ms: int = 5_000) -> None:
        super().__init__(name="procession-heartbeat", daemon=True)
        self.path, self.token, self.on_lost, self.busy_ms = path, token, on_lost, busy_ms
        self.stopped = threading.Event()
        self.beats = 0

    def run(self) -> None:
        con = sqlite3.connect(self.path, timeout=self.busy_ms / 1000, isolation_level=None)
        failing = ""  # what the last beat could not do (said once, and once more when it can again)
        try:
            while not self.stopped.wait(HEARTBEAT_S):
                try:
                    cur = con.execute("UPDATE lease SET heartbeat = ? WHERE id = 1 AND token = ?",
                                      (time.time(), self.token))
                except sqlite3.Error as exc:  # busy or failing: the next beat tries again
                    if str(exc) != failing:
                        log.warning("heartbeat: the lease is not renewed (%s); trying every %g s", exc, HEARTBEAT_S)
                        failing = str(exc)
                    continue
                if failing:
                    log.warning("heartbeat: the lease is renewed again")
                    failing = ""
                if cur.rowcount != 1:
                    log.error("another engine took the lease; stopping")
                    self.on_lost()
                    return
                self.beats += 1
        finally:
            con.close()

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=HEARTBEAT_S * 3)
