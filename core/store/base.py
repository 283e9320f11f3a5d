"""What a workspace store is, whatever holds it: one interface, two implementations.

A workspace lives in an SQLite file on one machine (``sqlite.SqliteStore``, the default) or in
a PostgreSQL database that several machines share (``postgres.PgStore``). Calls see only this:
a ``Store`` whose write transactions (``tx``, ``atomic``) commit whole or not at all, one at a
time, whose reads (``snapshot``) see one committed state, and a ``Tx`` that runs statements
written in SQLite's dialect (the PostgreSQL store translates them once each, see
``postgres.translate``).
"""

from __future__ import annotations

import asyncio

import json
import re
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar

from ..model import hosts
from ..model.errors import Fenced

Clock = Callable[[], float]
Params = Sequence[Any] | dict[str, Any]
T = TypeVar("T")

#: How a PostgreSQL workspace's address begins (libpq's two spellings): the only addresses a
#: workspace has; any other ``scheme://`` is refused, never taken for a file's path.
URL_SCHEMES = ("postgresql://", "postgres://")

#: A journal row. Its ``who`` in a database is the server's own word for the person, the role
#: it authenticated (``session_user``, which no statement of theirs can change), before what
#: the caller says of itself (``ana@laptop``, ``phone (web)``): a role per person makes the
#: journal say who, whatever a caller claims.
JOURNAL: Final = {
    "sqlite": "INSERT INTO journal (ts, actor, call, session_id, other_id, args, outcome, who)"
              " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
    "postgresql": "INSERT INTO journal (ts, actor, call, session_id, other_id, args, outcome, who)"
                  " VALUES (?, ?, ?, ?, ?, ?, ?, session_user || ' · ' || ?)",
}


def said(tx: Tx, by: Mapping[str, str]) -> str:
    """A statement as ``tx``'s database says it, where the two say a thing each its own way
    (``by``: the text for each ``Store.dialect``); what they say alike is written once."""
    return by[tx.store.dialect]


class Row(Protocol):
    """A row read by name or by position, as ``sqlite3.Row`` reads (and ``dict(row)`` makes)."""

    def __getitem__(self, key: int | str, /) -> Any: ...
    def keys(self) -> list[str]: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Any]: ...


#: The tables a host's engine writes that no other host's engine acts on: its runs and their
#: output, its lease, the journal, the stamps, and its own sessions' history, memory and requests
#: (the sessions themselves are told apart by their host, ``Tx.concerns``).
OWN_HOST: Final = frozenset({"runs", "run_output", "engines", "journal", "meta", "messages", "folds", "memory",
                             "memory_versions", "requests", "checkpoints"})
#: The tables no engine acts on, whoever writes them: what a call writes elsewhere (a message,
#: an answer to a request) may be what an engine waits for, so it concerns every host.
UNREAD: Final = frozenset({"journal", "meta"})
_WRITE: Final = re.compile(r"\s*(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM|REPLACE\s+INTO)\s+(\w+)", re.I)


class Tx(ABC):
    """One open transaction: statements, the journal row, and change stamps.

    Statements are SQLite's dialect with ``?`` or ``:name`` parameters; ``execute`` answers how
    many rows a statement changed, ``insert`` the id of the row it made, ``stream`` reads a big
    result a batch at a time."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.now = store.clock()
        self._rev: int | None = None
        self.followers: list[tuple[Any, ...]] = []
        #: the hosts whose engines must look at what it wrote (an engine's own is one of them);
        #: None: every host's, which is what any write says unless it is known to reach less far
        self.concerned: set[str] | None = set() if store.fence is None else {store.fence[0]}
        self._own = UNREAD if store.fence is None else OWN_HOST

    def concerns(self, host: str) -> None:
        """What it wrote reaches ``host``'s engine (a session of that host was changed)."""
        if self.concerned is not None:
            self.concerned.add(host)

    def reaches(self, sql: str) -> None:
        """Widen whom a write concerns to every host unless its table is one no other host's
        engine acts on (``OWN_HOST`` for an engine's writes, ``UNREAD`` for anyone else's); a
        session's change that returns its host is accounted for by its caller
        (``rows.update_session``)."""
        if self.concerned is None:
            return
        written = _WRITE.match(sql)
        if written is not None and written.group(1).lower() not in self._own and " RETURNING host" not in sql:
            self.concerned = None

    @abstractmethod
    async def execute(self, sql: str, params: Params = ()) -> int:
        """Run one statement; how many rows it changed (-1 for a statement that changes none)."""
        ...

    async def later(self, sql: str, params: Params = ()) -> None:
        """Run a write whose answer nobody waits for: at once here (SQLite's statements cost
        no round trip), or sent ahead of the transaction's next statement (PostgreSQL: a round
        trip saved). What it meets (a broken rule, a cut link) is raised by that statement or
        by the commit, and the transaction is rolled back all the same."""
        await self.execute(sql, params)

    @abstractmethod
    async def insert(self, sql: str, params: Params = ()) -> int:
        """Run one ``INSERT`` of one row into a table with an ``id`` key; the id it was given."""
        ...

    @abstractmethod
    async def many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one statement for each of ``rows``; nobody waits for its answer (``later``)."""
        ...

    @abstractmethod
    async def all(self, sql: str, params: Params = ()) -> list[Row]:
        ...

    @abstractmethod
    async def tuples(self, sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
        """Rows as plain tuples: cheaper than rows read by name when there are many to read."""
        ...

    @abstractmethod
    def stream(self, sql: str, params: Params = (), size: int = 1000) -> AsyncGenerator[list[tuple[Any, ...]], None]:
        """The rows of one query as plain tuples, at most ``size`` at a time: memory stays flat
        in the result's length."""
        ...

    async def one(self, sql: str, params: Params = ()) -> Row | None:
        rows = await self.all(sql, params)
        return rows[0] if rows else None

    async def value(self, sql: str, params: Params = ()) -> Any:
        row = await self.one(sql, params)
        return None if row is None else row[0]

    async def clock(self) -> float:
        """The time by the workspace's own clock, which every machine reads alike: leases and
        heartbeats are stamped and judged by it, so that a machine whose clock is off takes no
        live engine for dead, nor a dead one for live. A file's workspace has one machine: its
        clock (``now``)."""
        return self.now

    @abstractmethod
    async def defer_references(self) -> None:
        """Check references at commit rather than at each statement (rows written in any order)."""
        ...

    async def widen_cache(self, kib: int) -> int:
        """Hold ``kib`` of pages in memory for a long append; what ``restore_cache`` takes back."""
        return 0

    async def restore_cache(self, was: int) -> None:
        """Give back what ``widen_cache`` took."""

    async def renumber(self) -> None:
        """After rows were written with their own ids (a copy): new ids go on after the highest.
        (SQLite's do by themselves.)"""

    async def rev(self) -> int:
        """The change stamp of this transaction; sessions it touches carry it in ``rev``.

        The monitor asks for ``rev > last seen`` to redraw only changed rows.
        """
        if self._rev is None:
            self._rev = await self.value(
                "UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'rev' RETURNING value"
            )
        return int(self._rev)

    def stamped(self, rev: int) -> None:
        """The change stamp its beginning took (where taking the writers' lock stamps it)."""
        self._rev = rev

    async def touch(self, *sids: int) -> None:
        """Mark sessions changed (and active now) so that watchers see them."""
        rev = await self.rev()
        await self.many(
            "UPDATE sessions SET rev = ?, last_active = ? WHERE id = ?", [(rev, self.now, s) for s in sids]
        )

    async def journal(
        self, actor: str, call: str, sid: int | None, args: dict[str, Any], outcome: Any, other: int | None = None,
        who: str | None = None,
    ) -> int:
        """The journal row of this transaction's call; its id. ``who``: the person, where this
        process is not theirs alone (a paired device of the web face); else ``hosts.who``."""
        return await self.insert(JOURNAL[self.store.dialect], self._journal_row(actor, call, sid, args, outcome, other, who))

    async def together(self, *reads: Awaitable[Any]) -> list[Any]:
        """What ``reads`` (of this transaction, none needing another's answer) found, in order.
        Here one after the other: on SQLite a read costs no round trip (and a call's body runs
        whole on SQLite's thread, where nothing else may run at once); on PostgreSQL they are
        asked at once and go in one message (``PgTx.together``)."""
        return [await read for read in reads]

    def will_journal(self) -> None:
        """A journal row is to be written (a system call's): where its id costs a round trip
        of its own, it is taken with the transaction's beginning (PostgreSQL)."""

    def follow(self, actor: str, call: str, sid: int | None, args: dict[str, Any], outcome: Any) -> None:
        """A journal row for something the call caused (a trigger firing), written after the call's own."""
        self.followers.append(self._journal_row(actor, call, sid, args, outcome, None))

    def _journal_row(self, actor: str, call: str, sid: int | None, args: dict[str, Any], outcome: Any,
                     other: int | None, who: str | None = None) -> tuple[Any, ...]:
        return (self.now, actor, call, sid, other, json.dumps(args, default=str), json.dumps(outcome, default=str),
                who or hosts.who())


async def fenced(tx: Tx) -> None:
    """Refuse a write of an engine its host's lease is no longer held by (``Store.fence``), in
    the write's own transaction, after its lock: an engine cut off from the store while an
    operator declared it dead and another took its host over changes nothing once it is back,
    whatever it did meanwhile (its runs were the other's to recover)."""
    if tx.store.fence is None:
        return
    host, token = tx.store.fence
    if await tx.value("SELECT token FROM engines WHERE host = ?", (host,)) != token:
        raise Fenced(f"this engine no longer holds host {host}'s lease (it was declared dead, and may have been taken"
                     " over): it changes nothing more")


class Store(ABC):
    """An open workspace. Create with ``await open_store(target)``; close with ``close()``.

    ``path`` is what opens it again, in another process (a step's ``procession``, an engine):
    the SQLite file's path, or the PostgreSQL workspace's address without its password."""

    path: Path | str
    clock: Clock
    meta: dict[str, str]
    tokenizer: str
    count_tokens: Callable[[str], int]
    #: "sqlite" or "postgresql": what statements run on (a few are written for each)
    dialect: str
    #: nothing may be changed through it (a PostgreSQL role given read access only)
    readonly: bool = False
    #: what opening it with ``upgrade`` did to an older schema (``postgres.Upgraded``); None: nothing
    upgraded: Any = None
    #: the host and lease token of the engine writing through it: each write is refused once
    #: that lease is not its own (``fenced``); None for every other process
    fence: tuple[str, str] | None = None
    #: the host whose commits this process looks at (an engine's) besides those that concern
    #: every host (``Tx.concerned``); None: every commit. Where the store hears commits.
    interest: str | None = None

    @abstractmethod
    async def close(self) -> None:
        ...

    @abstractmethod
    def same_file(self) -> str | None:
        """Why the workspace open here is no longer the one at its path, in one line; None while it is."""
        ...

    @abstractmethod
    def tx(self) -> AbstractAsyncContextManager[Tx]:
        """A write transaction: all of it commits, or none of it does, even when the task
        running it is cancelled half-way. One at a time, across every process."""
        ...

    @abstractmethod
    def snapshot(self) -> AbstractAsyncContextManager[Tx]:
        """A read transaction: every query inside sees the same committed state."""
        ...

    @abstractmethod
    async def atomic(self, body: Callable[[Tx], Coroutine[Any, Any, T]]) -> T:
        """``body`` as one write transaction, as ``tx()`` makes it. ``body`` may wait on its
        statements only (the SQLite store runs it whole on SQLite's own thread)."""
        ...

    @abstractmethod
    async def data_version(self) -> int:
        """Changes when another connection commits: a cheap "something changed" signal."""
        ...

    #: Whether ``hear`` waits for other connections' commits (PostgreSQL's ``NOTIFY``); else
    #: (SQLite) ``data_version`` must be looked at now and then.
    hears = False

    async def hear(self, timeout: float) -> None:
        """Return when another connection commits, or after ``timeout`` seconds."""
        await asyncio.sleep(timeout)
