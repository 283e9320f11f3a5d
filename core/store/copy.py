"""A whole workspace copied into another store: SQLite to PostgreSQL (or back), losing nothing.

The copy is one write transaction on the target: it has all of the source or none of it. The
source is read in one snapshot (a consistent state, while its engine may go on writing: what
is written after is not copied, and the count said is the count copied); the engines' claims
are not copied, so a copy starts with no engine. Every row keeps its
id, so journal rows, forks and runs still name each other; the target's counters (PostgreSQL's
identity sequences) go on after the highest id copied. Then both stores are read again, table by
table in key order, and their row counts and SHA-256 hashes compared: the copy is reported only
when every table matches, and rolled back otherwise.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from ..model.errors import InvalidArgument, WorkspaceError
from . import search
from .base import Store, Tx
from .dialect import sqlite_schema, tables

#: Rows read and written at a time
BATCH = 2000
#: The meta rows that belong to a store's own making, not to the workspace
_OWN_META = ("schema",)
#: The tables that belong to the running store, not to the workspace: an engine's claim on
#: its host (``engines``: its pid, its heartbeat) holds the workspace it serves. Copied, it
#: named the source's engine, alive, as the copy's: the copy's monitor said another engine held
#: it, ``activate`` found an engine and said nothing, and ``procession run`` there was refused.
_NOT_COPIED = ("engines",)


@dataclass(slots=True)
class Copied:
    """What a copy moved, table by table: rows and the hash both stores agree on."""

    source: str
    target: str
    tables: dict[str, tuple[int, str]] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return sum(n for n, _ in self.tables.values())

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "rows": self.rows,
                "tables": {t: {"rows": n, "sha256": h} for t, (n, h) in self.tables.items()}}


def _layout() -> dict[str, tuple[list[str], list[str]]]:
    """Each table's columns and key, from the schema itself (the ``meta`` table included), of
    the tables a copy carries."""
    db = sqlite_schema()
    out: dict[str, tuple[list[str], list[str]]] = {}
    for table in sorted(tables(db)):
        if table in _NOT_COPIED:
            continue
        cols = db.execute(f"PRAGMA table_info({table})").fetchall()
        out[table] = [c[1] for c in cols], [c[1] for c in sorted(cols, key=lambda c: c[5]) if c[5]]
    return out


def _quoted(names: list[str]) -> str:
    return ", ".join(f'"{n}"' if n == "window" else n for n in names)


async def _digest(tx: Tx, table: str, cols: list[str], key: list[str]) -> tuple[int, str]:
    """How many rows ``table`` holds and the SHA-256 of them all, in key order."""
    where = f" WHERE key NOT IN ({', '.join(repr(k) for k in _OWN_META)})" if table == "meta" else ""
    digest, count = hashlib.sha256(), 0
    async for batch in tx.stream(f"SELECT {_quoted(cols)} FROM {table}{where} ORDER BY {_quoted(key)}", (), BATCH):
        for row in batch:
            digest.update(repr(tuple(row)).encode("utf-8", "surrogatepass"))
            digest.update(b"\n")
        count += len(batch)
    return count, digest.hexdigest()


async def copy_workspace(source: Store, target: Store) -> Copied:
    """Copy everything ``source`` holds into ``target``, which must hold nothing yet; verified."""
    if source.path == target.path:
        raise InvalidArgument("the source and the target are the same workspace")
    layout = _layout()
    copied = Copied(str(source.path), str(target.path))
    async with target.tx() as out:
        for table in ("agents", "sessions", "journal"):
            if await out.value(f"SELECT 1 FROM {table} LIMIT 1") is not None:
                raise WorkspaceError(f"{target.path} is not empty (it has {table}): a copy goes into a new workspace"
                                     " only, nothing was changed")
        await out.defer_references()
        async with source.snapshot() as src:
            for table, (cols, key) in layout.items():
                if table == "meta":  # the workspace's own (its uuid, its change stamp), over the new one's
                    await out.many("INSERT INTO meta (key, value) VALUES (?, ?)"
                                   " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                                   [r for r in await src.tuples("SELECT key, value FROM meta") if r[0] not in _OWN_META])
                    continue
                insert = f"INSERT INTO {table} ({_quoted(cols)}) VALUES ({', '.join('?' * len(cols))})"
                async for batch in src.stream(f"SELECT {_quoted(cols)} FROM {table} ORDER BY {_quoted(key)}", (), BATCH):
                    try:
                        await out.many(insert, batch)
                    except InvalidArgument as exc:
                        raise InvalidArgument(f"{table} holds a row {target.dialect} cannot take ({exc});"
                                              " nothing was copied") from None
            await out.renumber()
            await search.remake(out)  # the rows were not appended: the index takes them whole
            for table, (cols, key) in layout.items():
                mine = await _digest(src, table, cols, key)
                theirs = await _digest(out, table, cols, key)
                if mine != theirs:
                    raise WorkspaceError(f"the copy of {table} does not match its source ({mine[0]} rows, {theirs[0]}"
                                         " copied, or their contents differ): nothing was copied")
                copied.tables[table] = mine
    return copied
