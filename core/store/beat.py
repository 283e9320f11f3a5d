"""An engine's heartbeat on the engines table: a connection of its own to the workspace, outside
the store's transactions, so that a busy event loop (or a busy store) never holds a beat back
(the engine beats on a thread of its own). Apart from ``engines``, whose lease rows calls write:
it loads the PostgreSQL store's module, which no command on a workspace file needs."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from . import is_url
from .postgres import SERVER_NOW, linked


class Beat:
    """A connection of the heartbeat's own: the workspace file, or its PostgreSQL database, whose
    server's clock stamps the beat (``Tx.clock``: every machine judges it by that one clock)."""

    def __init__(self, con: Any, server: bool) -> None:
        self.con, self.server = con, server

    def renew(self, token: str) -> bool:
        if self.server:
            done = self.con.execute(f"UPDATE engines SET heartbeat = ({SERVER_NOW}) WHERE token = %s", (token,))
        else:
            done = self.con.execute("UPDATE engines SET heartbeat = ? WHERE token = ?", (time.time(), token))
        return bool(done.rowcount == 1)

    def schema(self) -> int:
        """The workspace's schema version, as its meta row says now (0 for none: what replaced
        the file is said by the engine, which finds it is not the workspace it opened)."""
        row = self.con.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        return int(row[0]) if row else 0

    def broken(self) -> bool:
        return bool(getattr(self.con, "broken", False) or getattr(self.con, "closed", False))

    def close(self) -> None:
        self.con.close()


def open_beat(path: Path | str, busy_ms: int) -> Beat:
    if is_url(path):
        import psycopg

        return Beat(psycopg.connect(linked(str(path)), autocommit=True, application_name="procession heartbeat"), True)
    return Beat(sqlite3.connect(path, timeout=busy_ms / 1000, isolation_level=None), False)


def beat_errors(path: Path | str) -> tuple[type[Exception], ...]:
    """What a beat may meet: SQLite's errors, or psycopg's for a database (imported only then:
    a file's beat opens at once, before anything can move the file away)."""
    if not is_url(path):
        return (sqlite3.Error,)
    import psycopg

    return (psycopg.Error,)
