"""The stores the call suite runs on: the conformance suite a backend passes.

``tests/core/test_calls.py`` (and each module marked ``STORES``) runs every system call, its
refusals and its journal row on every backend listed in ``BACKENDS``: a refused call must
leave every row as it was, an accepted one add exactly one journal row, whatever database
holds them. Each backend says how a test gets a workspace of its own, how every row of one is
read (``dump``: equal dumps, equal stores), and how a test runs a statement on one from outside
(``sql``: written in SQLite's dialect, as the tests write theirs). A third backend adds its
entry here (and a fixture starting its server, if it has one) and runs the same tests.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Target = Path | str


@dataclass(frozen=True)
class Backend:
    #: the scheme of its workspaces' addresses (None: a file's path)
    scheme: str | None
    #: the session fixture that is its server (None: it needs none)
    server: str | None
    #: a new workspace of its own for a test: (its server, the test's folder) -> its address
    workspace: Callable[[Any, Path], Target]
    dump: Callable[[Target], list[str]]
    sql: Callable[[Target, str, tuple[Any, ...]], list[tuple[Any, ...]]]


def _sqlite_dump(path: Target) -> list[str]:
    con = sqlite3.connect(path)
    try:
        return list(con.iterdump())
    finally:
        con.close()


def _sqlite_sql(path: Target, statement: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(path, isolation_level=None)
    try:
        return con.execute(statement, params).fetchall()
    finally:
        con.close()


def _pg_dump(url: Target) -> list[str]:
    """(Not where a table's ids go on: a sequence is not rolled back with the transaction that
    drew from it, so a refused call may leave a gap in the ids.)"""
    import psycopg

    with psycopg.connect(str(url), autocommit=True) as conn:  # one connection: a test dumps dozens of times
        tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
                                             " ORDER BY tablename")]
        return [f"{t}: {tuple(row)!r}" for t in tables for row in conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2")]


def _pg_sql(url: Target, statement: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    import psycopg

    from procession.store.dialect import translate

    with psycopg.connect(str(url), autocommit=True) as conn:
        cur = conn.execute(translate(statement), params)
        return [tuple(r) for r in cur.fetchall()] if cur.description else []


BACKENDS: dict[str, Backend] = {
    "sqlite": Backend(None, None, lambda server, folder: folder / "ws.db", _sqlite_dump, _sqlite_sql),
    "postgresql": Backend("postgresql", "postgres", lambda server, folder: str(server.workspace()), _pg_dump, _pg_sql),
}


def backend_of(target: Target) -> Backend:
    """The backend a workspace's address is of."""
    scheme = str(target).partition("://")[0] if "://" in str(target) else None
    return next(b for b in BACKENDS.values() if b.scheme == scheme)
