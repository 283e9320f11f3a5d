"""The workspace file: one SQLite database, opened safely, changed only in transactions.

``Store`` owns one aiosqlite connection. Every change goes through ``tx()``, a
``BEGIN IMMEDIATE`` transaction that either commits whole or rolls back whole; reads that
need a consistent view of several tables use ``snapshot()``. Calls on one ``Store`` are
serialised by an asyncio lock, so coroutines sharing it never interleave statements of two
transactions. Other processes are kept out by SQLite's own locks: a writer waits up to
``BUSY_TIMEOUT_MS`` and then gets ``StoreBusy`` with a plain message.

Opening never modifies a file that is not a Procession workspace: the header is checked
before SQLite touches it, and a workspace from a newer Procession is refused before any
pragma or migration writes to it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sqlite3
from stat import S_ISREG
import threading
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, cast

import aiosqlite

from . import schema, tokens
from .base import JOURNAL, URL_SCHEMES, Clock, Params, Row, Store, T, Tx, fenced
from ..model import hosts
from ..model.errors import InvalidArgument, StoreBusy, StoreFull, WorkspaceError

BUSY_TIMEOUT_MS = 10_000
#: Messages indexed for search per statement, when an older workspace is opened (then said)
SEARCH_BATCH = 100_000
#: The migration that gave sessions a host: the sessions of a file made before are this machine's
HOSTED = 14


log = logging.getLogger("procession.store")
#: An address's scheme (RFC 3986: a letter, then letters, digits, ``+``, ``-`` and ``.``).
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def workspace_path(path: Path | str) -> Path:
    """The absolute path of the workspace file ``path`` names, made absolute at once (a
    relative one would mean another file to a step running in its session's folder), or a
    one-line refusal of what names no file: an empty path, ``:memory:`` and ``file:`` URIs
    (SQLite's, which a workspace shared by processes cannot be), a path ending in a slash, and
    an address of a scheme no store speaks (``mysql://``, ``sqlite:///x``, a mistyped
    ``postgresq://``), which would otherwise become a folder named after it."""
    text = os.fspath(path)
    scheme = _SCHEME.match(text)
    if scheme:
        raise WorkspaceError(f"{text}: no workspace is at a {scheme[1]}:// address; a workspace is a file"
                             f" or a {' or '.join(URL_SCHEMES)} address")
    if not text.strip():
        raise WorkspaceError("the workspace path is empty")
    if "\0" in text:
        raise WorkspaceError("the workspace path holds a NUL character")
    if text == ":memory:" or text.startswith("file:"):
        raise WorkspaceError(f"{text} is not a workspace file: give the path of a file (a workspace is shared"
                             " by processes, so it cannot be in memory or a URI)")
    if text.endswith(os.sep):
        raise WorkspaceError(f"{text} names a folder, not a workspace file")
    return Path(os.path.abspath(os.path.expanduser(text)))


def _check_file(path: Path) -> bool:
    """Refuse a folder; return whether the file exists.

    The file itself is never opened here: on POSIX, closing *any* descriptor of a file drops
    every lock this process holds on it, so reading the header while another connection of
    this process (the monitor's engine, say) has the workspace open would silently break
    SQLite's locking. SQLite recognises a file that is not a database on its first read,
    without writing to it.
    """
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise WorkspaceError(f"{path} cannot be read: {exc.strerror}") from None
    if not S_ISREG(st.st_mode):
        raise WorkspaceError(f"{path} is not a workspace file")
    return True


def _create_file(path: Path) -> None:
    """Make an empty workspace file readable by its owner only, before SQLite opens it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.close(fd)
    except FileExistsError:
        pass
    except OSError as exc:
        raise WorkspaceError(f"cannot create {path}: {exc.strerror}") from None


def translate(exc: sqlite3.Error, path: Path) -> Exception:
    """Turn SQLite's failures into one-line errors a user can act on."""
    text = str(exc)
    if "locked" in text or "busy" in text:
        return StoreBusy(
            f"the workspace {path} stayed locked by another process for over"
            f" {BUSY_TIMEOUT_MS // 1000} s; nothing was changed, try again"
        )
    if "disk is full" in text or "disk I/O error" in text:
        return StoreFull(f"cannot write {path}: the disk is full or failing; nothing was changed")
    if "readonly" in text or "read-only" in text:
        return WorkspaceError(f"{path} is read-only; nothing was changed")
    if "not a database" in text:
        return WorkspaceError(f"{path} is not a Procession workspace (not an SQLite database)")
    if "malformed" in text or "corrupt" in text:
        return WorkspaceError(f"{path} is damaged ({text})")
    if "unable to open" in text:
        if path.exists() and not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)):
            return WorkspaceError(f"cannot open {path}: it (or its folder) is read-only, and a workspace needs"
                                  " to write beside itself; copy it somewhere writable")
        return WorkspaceError(f"cannot open {path}")
    return exc


@contextmanager
def _storable() -> Iterator[None]:
    """Values SQLite cannot hold are a user's mistake, not a crash: integers are 64-bit, text
    is UTF-8 (a lone surrogate has no UTF-8 form), and nothing but numbers, texts and bytes can
    be bound (a call checks its own ``int`` arguments first, naming them: ``syscall.check_ints``;
    this says it for the reads, ``ws.show(spawned)``)."""
    try:
        yield
    except OverflowError:
        raise InvalidArgument("a number is out of range (SQLite integers are 64-bit)") from None
    except UnicodeEncodeError:
        raise InvalidArgument("a text is not valid Unicode (it holds a lone surrogate)") from None
    except sqlite3.ProgrammingError as exc:
        unbound = _UNBOUND.search(str(exc))
        if unbound is None:
            raise
        raise InvalidArgument(f"a {unbound[1]} cannot be stored or looked up (numbers, texts and bytes can): where a"
                              " session belongs, give its id, an int (an outcome record's .sid)") from None


#: sqlite3's refusal of a value it cannot bind ("Error binding parameter 1: type 'Spawned' is not supported")
_UNBOUND = re.compile(r"type '(\w+)' is not supported")


class SqliteTx(Tx):
    """A transaction on the workspace file's connection."""

    def __init__(self, store: SqliteStore) -> None:
        super().__init__(store)
        self.conn = store.conn

    async def execute(self, sql: str, params: Params = ()) -> int:
        with _storable():
            return (await self.conn.execute(sql, params)).rowcount

    async def insert(self, sql: str, params: Params = ()) -> int:
        with _storable():
            return int((await self.conn.execute(sql, params)).lastrowid or 0)

    async def many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with _storable():
            await self.conn.executemany(sql, rows)

    async def all(self, sql: str, params: Params = ()) -> list[Row]:
        with _storable():
            return list(await self.conn.execute_fetchall(sql, params))

    async def tuples(self, sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
        with _storable():
            cursor = await self.conn.execute(sql, params)
            cursor.row_factory = None
            return cast(list[tuple[Any, ...]], list(await cursor.fetchall()))  # plain tuples, no factory

    async def stream(self, sql: str, params: Params = (), size: int = 1000) -> AsyncGenerator[list[tuple[Any, ...]], None]:
        with _storable():
            cursor = await self.conn.execute(sql, params)
        cursor.row_factory = None
        try:
            while found := cast(list[tuple[Any, ...]], list(await cursor.fetchmany(size))):  # no row factory
                yield found
        finally:
            await cursor.close()

    async def defer_references(self) -> None:
        await self.execute("PRAGMA defer_foreign_keys = ON")

    async def widen_cache(self, kib: int) -> int:
        """SQLite's page cache, so that a long append does not spill to the WAL every few rows."""
        was = int(await self.value("PRAGMA cache_size"))
        await self.execute(f"PRAGMA cache_size = {-int(kib)}")
        return was

    async def restore_cache(self, was: int) -> None:
        await self.execute(f"PRAGMA cache_size = {int(was)}")


class _Abandoned(Exception):
    """The caller of an inline transaction was cancelled: it rolls back at its next statement."""


class _Inline(SqliteTx):
    """A transaction run whole on SQLite's own thread (``Store.atomic``): every statement runs
    at once, no handoff between threads, and the body's awaits never suspend."""

    def __init__(self, store: SqliteStore, raw: sqlite3.Connection, abandoned: threading.Event) -> None:
        super().__init__(store)
        self.raw = raw
        self.abandoned = abandoned

    def _cursor(self, sql: str, params: Params) -> sqlite3.Cursor:
        if self.abandoned.is_set():
            raise _Abandoned
        with _storable():
            return self.raw.execute(sql, params)

    async def execute(self, sql: str, params: Params = ()) -> int:
        return self._cursor(sql, params).rowcount

    async def insert(self, sql: str, params: Params = ()) -> int:
        return int(self._cursor(sql, params).lastrowid or 0)

    async def many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        if self.abandoned.is_set():
            raise _Abandoned
        with _storable():
            self.raw.executemany(sql, rows)

    async def all(self, sql: str, params: Params = ()) -> list[Row]:
        return list(self._cursor(sql, params).fetchall())

    async def tuples(self, sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
        cursor = self._cursor(sql, params)
        cursor.row_factory = None
        return cast(list[tuple[Any, ...]], cursor.fetchall())

    async def stream(self, sql: str, params: Params = (), size: int = 1000) -> AsyncGenerator[list[tuple[Any, ...]], None]:
        cursor = self._cursor(sql, params)
        cursor.row_factory = None
        try:
            while found := cast(list[tuple[Any, ...]], cursor.fetchmany(size)):
                yield found
        finally:
            cursor.close()


def _drive(body: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never has to wait to its end, here and now (a bare ``yield``,
    as ``asyncio.sleep(0)`` makes, is no wait); refused if it waits on anything."""
    try:
        while True:
            if body.send(None) is not None:
                body.close()
                raise RuntimeError("a call's transaction waited on something outside the store: a call body"
                                   " runs on SQLite's thread and may wait only on its statements")
    except StopIteration as done:
        return cast(T, done.value)


class SqliteStore(Store):
    """A workspace in an SQLite file. Create with ``await SqliteStore.open(path)``."""

    dialect = "sqlite"
    path: Path

    def __init__(self, conn: aiosqlite.Connection, path: Path, clock: Clock, meta: dict[str, str]) -> None:
        self.conn = conn
        self.path = path
        self.clock = clock
        self.meta = meta
        self.tokenizer, self.count_tokens = tokens.counter(meta.get("tokenizer", tokens.ESTIMATOR))
        self._lock = asyncio.Lock()
        # what the path and its -wal named when opened, for ``same_file`` (None: not there)
        self.identity = _identity(path)
        self.wal_identity = _identity(_wal(path))

    @classmethod
    async def open(cls, path: Path | str, *, clock: Clock = time.time, create: bool = True) -> SqliteStore:
        path = workspace_path(path)
        exists = _check_file(path)
        if not exists:
            if not create:
                raise WorkspaceError(f"no workspace at {path} (a spawn or a load makes one)")
            _create_file(path)
        try:
            conn = await _connect(path)
        except sqlite3.Error as exc:
            raise translate(exc, path) from None
        conn.row_factory = sqlite3.Row
        try:
            await conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            # one statement, so one view of the file: read apart, another process's first
            # migration could commit between the two and make a new workspace look foreign
            (version, foreign), = await conn.execute_fetchall(
                "SELECT (SELECT user_version FROM pragma_user_version),"
                " (SELECT user_version FROM pragma_user_version) = 0 AND EXISTS (SELECT 1 FROM sqlite_master)")
            if version > schema.VERSION:
                raise WorkspaceError(
                    f"{path} was made by a newer Procession (schema {version}; this one knows up to"
                    f" {schema.VERSION}); upgrade procession to open it"
                )
            if foreign:
                raise WorkspaceError(f"{path} is an SQLite database of another program, not a Procession workspace")
            await conn.execute("PRAGMA synchronous = NORMAL")
            mode = await _pragma(conn, "journal_mode")
            if mode != "wal":
                await _pragma(conn, "journal_mode = WAL")
            if version < schema.VERSION:
                await cls._migrate(conn)  # foreign keys off: a migration may rebuild a table others refer to
            await conn.execute("PRAGMA foreign_keys = ON")
            meta = {r[0]: r[1] for r in await conn.execute_fetchall("SELECT key, value FROM meta")}
        except BaseException as exc:
            await conn.close()
            if isinstance(exc, sqlite3.Error):
                raise translate(exc, path) from None
            raise
        return cls(conn, path, clock, meta)

    @staticmethod
    async def _migrate(conn: aiosqlite.Connection) -> None:
        """Apply the missing migrations, one transaction each; safe against a racing opener.

        Foreign keys are not enforced yet (a migration may rebuild a table, as SQLite's
        ALTER TABLE cannot reorder or retype columns); each migration is checked with
        ``foreign_key_check`` before it commits."""
        for number, script in enumerate(schema.MIGRATIONS, start=1):
            await conn.execute("BEGIN IMMEDIATE")
            try:
                current = await _pragma(conn, "user_version")
                if current < number:
                    for statement in _statements(script):
                        await conn.execute(statement)
                    if number == HOSTED:
                        await conn.execute("UPDATE sessions SET host = ? WHERE host = ''", (hosts.this(),))
                    if number == schema.SEARCHED:
                        await _index_said(conn)
                    if number == 1:
                        await conn.executemany(
                            "INSERT INTO meta (key, value) VALUES (?, ?)",
                            [
                                ("uuid", str(uuid.uuid4())),
                                ("created", repr(time.time())),
                                ("tokenizer", tokens.choose()),
                                ("rev", "0"),
                            ],
                        )
                    broken = list(await (await conn.execute("PRAGMA foreign_key_check")).fetchall())
                    if broken:
                        raise WorkspaceError(f"migration {number} would break {len(broken)} references; nothing"
                                             " was changed")
                    await conn.execute(f"PRAGMA user_version = {number}")
                await conn.execute("COMMIT")
            except BaseException:
                await conn.execute("ROLLBACK")
                raise

    async def close(self) -> None:
        await self.conn.close()

    def same_file(self) -> str | None:
        """Why the workspace open here is no longer the file at its path, in one line; None
        while it is. Changes made through a connection to a file that was replaced, moved or
        deleted, or whose -wal file was deleted, are seen by no other process (and, for a
        deleted -wal, lost on close): a long-lived holder (the engine, the monitor) asks this
        to stop rather than go on alone."""
        now = _identity(self.path)
        if now is None:
            return f"{self.path} is gone: the workspace open here was moved or deleted"
        if now != self.identity:
            return f"{self.path} is another file now: the workspace open here was replaced or moved away"
        if self.wal_identity is not None and _identity(_wal(self.path)) != self.wal_identity:
            return (f"{_wal(self.path)} was deleted or replaced while the workspace was open: its latest changes"
                    " are no longer where other processes read them")
        return None

    async def _settle(self, sql: str) -> None:
        """Run a transaction statement to its end even if the caller is cancelled meanwhile.

        aiosqlite runs statements on its own thread: cancelling the await does not cancel
        the statement. A BEGIN that went through after its caller was cancelled would leave
        the connection in a transaction holding the write lock, and every other process
        waiting on it; so the statement is shielded, and awaited to its end before the
        cancellation goes on.
        """
        done = asyncio.ensure_future(self.conn.execute(sql))
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:
            await asyncio.wait([done])
            if not done.cancelled() and done.exception() is None and sql.startswith("BEGIN"):
                await self._rollback()
            raise

    async def _rollback(self) -> None:
        """End whatever transaction is open (none is fine), whatever happens to the caller."""
        done = asyncio.ensure_future(self.conn.execute("ROLLBACK"))
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:
            await asyncio.wait([done])
            raise
        except sqlite3.OperationalError as exc:
            if "no transaction is active" not in str(exc):
                raise

    @asynccontextmanager
    async def tx(self) -> AsyncIterator[Tx]:
        """A write transaction: all of it commits, or none of it does, even when the task
        running it is cancelled half-way."""
        async with self._lock:
            try:
                await self._settle("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise translate(exc, self.path) from None
            tx = SqliteTx(self)
            try:
                await fenced(tx)
                yield tx
                if tx.followers:
                    await tx.many(JOURNAL[self.dialect], tx.followers)
                await self._settle("COMMIT")
            except BaseException as exc:
                await self._rollback()
                if isinstance(exc, sqlite3.Error):
                    raise translate(exc, self.path) from None
                raise

    async def atomic(self, body: Callable[[Tx], Coroutine[Any, Any, T]]) -> T:
        """``body`` as one write transaction, as ``tx()`` makes it (all of it commits or none
        of it, a cancelled caller's rolls back), run whole on SQLite's own thread: one handoff
        between threads for the call, however many statements it makes (a call made through
        ``tx()`` hands each statement over and back). So ``body`` may wait on its statements
        only: nothing else runs on that thread (an asyncio call there finds no event loop)."""
        async with self._lock:
            abandoned = threading.Event()

            def run() -> T:
                raw = self.conn._conn
                raw.execute("BEGIN IMMEDIATE")
                try:
                    tx = _Inline(self, raw, abandoned)
                    _drive(fenced(tx))
                    value = _drive(body(tx))
                    if tx.followers:
                        raw.executemany(JOURNAL[self.dialect], tx.followers)
                    if abandoned.is_set():
                        raise _Abandoned
                    raw.execute("COMMIT")
                    return value
                except BaseException:
                    if raw.in_transaction:  # SQLite ends it itself on some errors (a full disk)
                        raw.execute("ROLLBACK")
                    raise

            # aiosqlite's own queue: the job runs on the thread that holds the connection
            done = asyncio.ensure_future(self.conn._execute(run))  # type: ignore[no-untyped-call]
            try:
                return await asyncio.shield(done)
            except asyncio.CancelledError:
                abandoned.set()
                await asyncio.wait([done])
                if not done.cancelled():
                    done.exception()  # its rollback's, taken: the caller's cancellation is what goes on
                raise
            except sqlite3.Error as exc:
                raise translate(exc, self.path) from None

    @asynccontextmanager
    async def snapshot(self) -> AsyncIterator[Tx]:
        """A read transaction: every query inside sees the same committed state."""
        async with self._lock:
            try:
                await self._settle("BEGIN")
            except sqlite3.Error as exc:
                raise translate(exc, self.path) from None
            try:
                yield SqliteTx(self)
            except sqlite3.Error as exc:
                raise translate(exc, self.path) from None
            finally:
                await self._rollback()

    async def data_version(self) -> int:
        """Changes when another connection commits: a cheap "something changed" signal."""
        async with self._lock:
            return int(await _pragma(self.conn, "data_version"))


async def _connect(path: Path) -> aiosqlite.Connection:
    """An aiosqlite connection whose thread does not keep the interpreter alive.

    aiosqlite runs each connection on a non-daemon thread that ends only when the connection is
    closed: a program that raises (or simply ends) between ``Workspace.open`` and ``close`` would
    never exit, the interpreter waiting on that idle thread forever. Made a daemon, the thread
    dies with the program. Nothing accepted is lost: every call commits its own transaction
    before it returns, and SQLite's journal rolls back, at the next opening, any transaction a
    program died in the middle of (which no caller was told had happened)."""
    connecting = aiosqlite.connect(path, isolation_level=None)
    # before awaiting, which starts the thread; up to aiosqlite 0.21 the connection is the thread
    cast(threading.Thread, getattr(connecting, "_thread", connecting)).daemon = True
    return await connecting


async def _pragma(conn: aiosqlite.Connection, name: str) -> Any:
    """A pragma's value, its statement run to its end: a statement left half-read keeps a read
    lock, and a connection holding one is refused a write lock at once (no busy wait) while
    another process writes, which is what parallel first opens of a new file do."""
    rows = list(await conn.execute_fetchall(f"PRAGMA {name}"))
    assert rows  # a pragma without an argument always answers
    return rows[0][0]


def _wal(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


def _identity(path: Path) -> tuple[int, int] | None:
    """The file ``path`` names now, as (device, inode); None when there is none."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


async def _index_said(conn: aiosqlite.Connection) -> None:
    """Index the messages a workspace held before it had a search index, a batch at a time
    (in the migration's transaction: all of them, or none and the migration again at the next
    opening), saying how far it is where the CLI shows it (``procession.store``'s log)."""
    (top,), = await conn.execute_fetchall("SELECT coalesce(max(id), 0) FROM messages")
    for at in range(0, top, SEARCH_BATCH):
        await conn.execute("INSERT INTO messages_search (rowid, content) SELECT id, content FROM messages"
                           " WHERE id > ? AND id <= ?", (at, at + SEARCH_BATCH))
        log.info("indexing what was said, for search: %s of %s messages", f"{min(at + SEARCH_BATCH, top):,}",
                 f"{top:,}")


def _statements(script: str) -> list[str]:
    """Split a migration into statements: one ends at a semicolon where SQLite finds it whole
    (a trigger's body holds semicolons of its own; ours hold none inside literals)."""
    out, part = [], ""
    for piece in script.split(";"):
        part += piece + ";"
        if sqlite3.complete_statement(part):
            if part.strip(" \n;"):
                out.append(part.strip())
            part = ""
    return out
