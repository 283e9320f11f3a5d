"""A workspace in a PostgreSQL database: the store several machines share.

The driver is psycopg 3 (``psycopg[binary]``), not asyncpg: it speaks the DB-API that
``sqlite3`` speaks (cursors, ``rowcount``, ``executemany``, named and positional parameters),
so the calls' statements, written once in SQLite's dialect, run here through one small
translation (``dialect.translate``) instead of a second set of queries; it has ``LISTEN``/
``NOTIFY`` (``data_version``) and server-side cursors (``Tx.stream``); and it is the
PostgreSQL project's own Python driver, kept by its maintainers. asyncpg is faster per row,
but knows only ``$1`` parameters and its own types.

Semantics are SQLite's: a write transaction first locks the workspace's one ``rev`` row of
``meta`` (``WRITE_BEGIN`` stamps it), so write transactions run one at a time across every process and
machine, in the order they commit (the change stamp ``rev`` only grows, as the monitor
expects; a call's reads and its writes see one state no other writer changes meanwhile). A
row lock needs the privilege to update the row: a role given ``SELECT`` only cannot take it
(refused at once, in one line) and so can never hold up the writers (an advisory lock, which
needs no privilege, could be held by any role that may connect); reads
(``snapshot``) are ``REPEATABLE READ``: one committed state. Values are checked as SQLite's
binding checks them (64-bit integers, UTF-8 text), and text cannot hold a NUL character
(PostgreSQL's rule, said in one line). Every committed write notifies the workspace's channel
(``CHANNEL`` and its schema's hash): another process's ``data_version`` moves without polling
the tables. An engine's commit names the hosts it concerns (``Tx.concerned``), and an engine
hears only its own host's and those of every host's concern: ten hosts' engines each looked
at every commit of the other nine, and spent the machine on it.

Round trips are what a call costs here, so none is spent that can be saved: a transaction's
beginning goes with its first statement, the change stamp with its lock, and a call's journal
row's id with them (``RESERVING``); a write whose answer nobody reads (``Tx.later``, a few rows
of ``many``, the journal row) waits and goes with the next statement, or with the
notification and the ``COMMIT`` (``PgTx._send``: one message of several statements, bound
client-side, numbers typed as server-side binding types them). A ``send`` is two round trips:
its session read with the beginning, its writes with the commit. Every statement goes in
such a message, and none is planned at each call: each is prepared once per connection
(``Prepared``) and sent as ``EXECUTE name(values)``, which the server parses in microseconds
where planning the statement's text took it a tenth of a millisecond or more; the values are
written into it as constants (``_literal``), in a quarter of the time psycopg's general
binding took. A message is awaited in the call's own task: a call cancelled meanwhile has
psycopg ask the server to cancel what it does, and rolls back what is left (a task of its own
for each message, to see it through, cost two more turns of the event loop each). psycopg's own
preparing (the extended protocol, a statement at a time) would have needed a pipeline for the
messages, which cost more in Python than the planning cost the server; and psycopg answers a
rollback by letting go of every statement the connection prepared, ours too, when it prepared
some itself: it prepares only a load's statement, for its rows (``PgTx.many``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import re
import time
import urllib.parse
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from . import schema, tokens
from ..model import hosts
from .base import JOURNAL, Clock, Params, Row, Store, T, Tx, fenced
from .dialect import Unupgradable, schema_ddl, translate
from ..model.errors import InvalidArgument, StoreBusy, StoreUnreachable, WorkspaceError

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger("procession.store")
#: How long a write transaction waits for the writer lock before it says the workspace is busy
BUSY_TIMEOUT_S = 10
#: The lock every write transaction takes first, held until it ends: one writer at a time, as in
#: SQLite; one per workspace (a database may hold several, each in a schema of its own, each
#: with its own ``meta``). ``FOR UPDATE`` needs the UPDATE privilege on ``meta``: a role that
#: may only read is refused it at once, and never blocks a writer. A row lock, not ``LOCK
#: TABLE``: nothing else (autovacuum, a reader) ever waits on it.
WRITE_LOCK = "SELECT 1 FROM meta WHERE key = 'rev' FOR UPDATE"
#: How a write transaction begins: the lock taken by stamping the row (an update locks it as
#: ``WRITE_LOCK`` does), so that the change stamp every write needs (``Tx.rev``) costs no round
#: trip of its own; waited for ``BUSY_TIMEOUT_S`` at most (``StoreBusy``), no longer after (the
#: stamp's ``RETURNING`` sets the wait back, the row held: no statement of its own).
WRITE_BEGIN = ("BEGIN", f"SET LOCAL lock_timeout = '{BUSY_TIMEOUT_S}s'",
               "UPDATE meta SET value = CAST(CAST(value AS BIGINT) + 1 AS TEXT) WHERE key = 'rev'"
               " RETURNING value, set_config('lock_timeout', '0', true)")
#: The same, a call's journal row's id taken with the stamp (``PgTx.will_journal``; after the
#: writers' lock, so ids still grow in the order calls commit): the row then waits to go with
#: the commit, and the call costs no round trip for it.
RESERVING = (*WRITE_BEGIN[:-1], WRITE_BEGIN[-1] + ", nextval(pg_get_serial_sequence('journal', 'id'))")
SNAPSHOT_BEGIN = ("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",)
#: The journal row of that id (``base.JOURNAL``'s, its id given).
JOURNAL_AT = ("INSERT INTO journal (id, ts, actor, call, session_id, other_id, args, outcome, who)"
              " VALUES (?, ?, ?, ?, ?, ?, ?, ?, session_user || ' · ' || ?)")
#: What two first openers of an empty schema take to make the workspace once: there is no row
#: to lock yet. Taken only while there is no workspace (a role that holds it keeps no writer
#: of an existing workspace waiting).
_CREATOR = f"SELECT pg_advisory_xact_lock({0x70726F63}, hashtext(current_schema()))"  # "proc"
#: How many rows of one ``many`` wait to be sent with the next statement, bound as text; more
#: are sent at once, bound server-side (a transcript's load)
QUEUED_ROWS = 8
#: How many statements a connection keeps prepared (``Prepared``); the least recently used is
#: let go past it, so that statements made of a varying number of values cannot fill the server
PREPARED = 256
#: The statements the server can prepare (its ``PREPARE``), by their first word
_PREPARABLE = re.compile(r"\s*\(*\s*(SELECT|INSERT|UPDATE|DELETE|WITH|VALUES)\b", re.IGNORECASE)
#: A statement's parameters as psycopg writes them (``%s``), and its escaped ``%``
_PLACEHOLDER = re.compile(r"%[s%]")
#: How a value's parameter is declared to ``PREPARE``: as server-side binding types it (a text,
#: like psycopg's, typed by where it is used)
_DECLARED = {int: "int8", bool: "int8", float: "float8", bytes: "bytea"}
#: The names of prepared statements: never one twice in a process, so that a name a failed
#: message may have left prepared is never prepared again
_NAMES = itertools.count(1)
#: The channel a commit notifies, of this workspace's schema (its hash's digits follow)
CHANNEL = "procession_"
#: The server's time, in seconds since the epoch: the one clock of every host's leases.
SERVER_NOW = "SELECT EXTRACT(EPOCH FROM clock_timestamp())"
#: What every connection is opened with, unless the workspace's address says otherwise (libpq's
#: own parameters): a server that does not answer is given up after ``connect_timeout``; a link
#: cut under an idle connection is found by TCP keepalives (a probe after 3 s of silence, then
#: each second, given up after 3 unanswered: about 6 s), and under one that sent a statement by
#: ``tcp_user_timeout`` (data unacknowledged for 5 s). Without them a cut network froze every
#: engine for the kernel's own 15 minutes and left calls hanging, and no one said why. And the
#: connection speaks UTF-8, asked as it opens, so that no reload of the server's settings
#: changes it under the store's own writing of values (``_literal``).
LINK: dict[str, str] = {"connect_timeout": "5", "keepalives": "1", "keepalives_idle": "3", "keepalives_interval": "1",
                        "keepalives_count": "3", "tcp_user_timeout": "5000", "client_encoding": "UTF8"}


def linked(url: str) -> str:
    """``url`` with the ``LINK`` parameters it does not set itself (an operator's own win)."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    given = conninfo_to_dict(url)
    return make_conninfo(url, **{key: value for key, value in LINK.items() if key not in given})


def safe_url(url: str) -> str:
    """``url`` without its password: what is shown, journaled, and handed to a step (which
    finds the password where libpq does, ``PGPASSWORD`` or ``~/.pgpass``)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = (f"{parts.username}@" if parts.username else "") + (f"[{host}]" if ":" in host else host)
    netloc += f":{parts.port}" if parts.port else ""
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


class PgRow(tuple[Any, ...]):
    """A row read by name or by position, as ``sqlite3.Row`` reads."""

    __slots__ = ()
    names: dict[str, int] = {}

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self.names[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self.names)


def _row_factory(cursor: Any) -> Callable[[Sequence[Any]], PgRow]:
    """Rows of the cursor's result, their names read off the result itself (the driver's
    ``description`` makes an object per column, at each statement: a session's row has 70)."""
    result = cursor.pgresult
    if result is None or not result.nfields:
        return PgRow
    return _row_class(tuple(result.fname(i).decode() for i in range(result.nfields)))


@functools.lru_cache(maxsize=1024)
def _row_class(names: tuple[str, ...]) -> type[PgRow]:
    return type("Row", (PgRow,), {"names": {n: i for i, n in enumerate(names)}, "__slots__": ()})


@functools.cache
def _typed_literal(name: str) -> type[Any]:
    """A number bound as text the way it is bound server-side: typed (``'7'::int8``), not a
    bare literal (``7``, an ``integer``; ``1.5``, a ``numeric``), so that what a statement
    makes of it (a recursive query's column, a ``UNION``) does not depend on how it was sent."""
    import psycopg
    from psycopg.adapt import Dumper

    class Typed(Dumper):
        oid = psycopg.postgres.types[name].oid

        def dump(self, obj: Any) -> bytes:
            return repr(int(obj) if name == "int8" else float(obj)).encode()

        def quote(self, obj: Any) -> bytes:
            return b"'" + self.dump(obj) + b"'::" + name.encode()

    return Typed


def _check(params: Params) -> Params:
    """Refuse what SQLite refuses to bind, in its words: a 64-bit integer range, text that is
    Unicode (and, PostgreSQL's own rule, holds no NUL), numbers, texts and bytes only. A
    subclass of str or int (an enum's member) is bound as its plain value, as SQLite binds it."""
    if isinstance(params, dict):
        return {k: _value(v) for k, v in params.items()}
    return [_value(v) for v in params]


def _value(value: Any) -> Any:
    kind = type(value)
    if kind is str or kind is float or value is None or kind is bytes:
        if kind is str and "\0" in value:
            raise InvalidArgument("a text holds a NUL character, which a PostgreSQL workspace cannot store")
        return value
    if kind is int or kind is bool:
        if not -(2**63) <= value < 2**63:
            raise InvalidArgument("a number is out of range (integers are 64-bit)")
        return value
    if isinstance(value, str):
        return _value(str.__str__(value))
    if isinstance(value, int):
        return _value(int(value))
    if isinstance(value, float):
        return float(value)
    raise InvalidArgument(f"a {kind.__name__} cannot be stored or looked up (numbers, texts and bytes can):"
                          " where a session belongs, give its id, an int (an outcome record's .sid)")


def _literal(value: str | int | float | bytes | None) -> str:
    """A checked value (``_value``'s) written as a constant of PostgreSQL's own syntax, read the
    same whatever the server's ``standard_conforming_strings`` (which a reload of its settings
    can turn off under an open connection, between two messages): a text between single quotes,
    each quote in it doubled, and one that holds a backslash an escape string (``E'...'``), each
    backslash doubled too, as libpq's own quoting writes them; bytes in hex, as an escape string;
    a number typed as server-side binding types it (``_typed_literal``). A quarter of the time
    psycopg's general binding took (most of what binding a ``send`` cost). Sound in UTF-8, where
    no byte of a character is a quote or a backslash (``Prepared.literal``); a text that is not
    Unicode is refused as psycopg refuses it (``UnicodeEncodeError``)."""
    if isinstance(value, str):
        if not value.isascii():
            value.encode()
        if "\\" in value:
            return "E'" + value.replace("\\", "\\\\").replace("'", "''") + "'"
        return "'" + value.replace("'", "''") + "'"
    if value is None:
        return "NULL"
    if isinstance(value, int):
        return f"'{int(value)}'::int8"
    if isinstance(value, float):
        return f"'{value!r}'::float8"
    return "E'\\\\x" + value.hex() + "'::bytea"


class Prepared:
    """The statements a connection has prepared, so that a message of statements bound as
    text (``PgTx._send``) runs plans made once instead of planning each statement at each call
    (the most of what a ``send`` cost the server). Keyed by a statement's text and the types of
    its values, as each is declared to ``PREPARE`` (``_DECLARED``); a name is kept only once the
    message that prepared it was carried out (a ``PREPARE`` outlives a rollback: one of a message
    that failed is left under a name never used again). Past ``PREPARED``, the least recently
    used are let go (``DEALLOCATE``) as a later transaction begins, never while one may still
    use them."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn  # whose they are: another connection (the first one dropped) has none
        #: whether ``_literal`` may write its values: the connection speaks UTF-8 (``LINK``'s, kept
        #: under a reload of the server's settings; elsewhere psycopg binds, in the one it speaks)
        self.literal = conn.info.encoding == "utf-8"
        self.names: OrderedDict[tuple[str, tuple[str, ...]], str] = OrderedDict()
        self.making: dict[tuple[str, tuple[str, ...]], str] = {}  # prepared by the message being made
        self.ahead: list[str] = []  # the PREPAREs the next message begins with
        self.unused: list[str] = []  # the DEALLOCATEs the next transaction's first message begins with

    def execute(self, text: str, values: Sequence[Any]) -> str | None:
        """``text`` (psycopg's form, ``%s`` for each of ``values``, checked: ``_check``) as an
        ``EXECUTE`` of its prepared statement, its values written in it (``_literal``), prepared
        ahead of the message if it is not yet; None for a statement the server cannot prepare,
        or on a connection whose strings ``_literal`` cannot write (psycopg binds it then)."""
        if not self.literal:
            return None
        key = (text, tuple(_DECLARED.get(type(v), "unknown") for v in values))
        name = self.names.get(key)
        if name is not None:
            self.names.move_to_end(key)
        elif (name := self.making.get(key)) is None:
            if ";" in text or not _PREPARABLE.match(text):
                return None
            name = self.making[key] = f"procession_{next(_NAMES)}"
            count = itertools.count(1)
            body = _PLACEHOLDER.sub(lambda m: "%" if m.group(0) == "%%" else f"${next(count)}", text)
            self.ahead.append(f"PREPARE {name}({', '.join(key[1])}) AS {body}" if values else f"PREPARE {name} AS {body}")
        return f"EXECUTE {name}({', '.join([_literal(v) for v in values])})" if values else f"EXECUTE {name}"

    def message(self, statements: Sequence[str], *, begins: bool = False) -> list[str]:
        """``statements`` as one message, what they need prepared ahead of them: each statement
        of the message, with those put ahead. A message that ``begins`` a transaction has
        them after its first statement (``BEGIN`` must come first to set the transaction's
        kind), with what is let go."""
        ahead = [*(self.unused if begins else ()), *self.ahead]
        self.ahead = []
        if begins:
            self.unused = []
            return [statements[0], *ahead, *statements[1:]]
        return [*ahead, *statements]

    def sent(self, done: bool) -> None:
        """The message was carried out (``done``), or not: what it prepared is kept, or its
        names are never used again."""
        if done:
            self.names.update(self.making)
        self.making.clear()
        while len(self.names) > PREPARED:
            self.unused.append(f"DEALLOCATE {self.names.popitem(last=False)[1]}")


@dataclass(frozen=True)
class Answer:
    """What a statement of a message answered: its rows (none for a write), how many it wrote."""

    rows: list[Row]
    count: int


async def _answers(cursor: Any, sent: int, asked: int,
                   opened: Callable[[int, Sequence[Any]], None] | None = None) -> list[Answer]:
    """The answers of the last ``asked`` of the ``sent`` statements of the message ``cursor``
    sent, the cursor at its first result; ``opened`` is given the first row of each earlier one
    that has one (what a transaction's beginning took)."""
    found = []
    for at in range(sent):
        if at >= sent - asked:
            rows = await cursor.fetchall() if cursor.pgresult is not None and cursor.pgresult.nfields else []
            found.append(Answer(cast(list[Row], rows), cursor.rowcount))
        elif opened is not None and cursor.pgresult is not None and cursor.pgresult.nfields \
                and (value := await cursor.fetchone()) is not None:
            opened(at, value)
        if at < sent - 1:
            cursor.nextset()
    return found


class PgTx(Tx):
    """A transaction on the workspace database's connection, begun with its first statement
    (``opening``: sent together, one round trip instead of two)."""

    def __init__(self, store: PgStore, opening: tuple[str, ...]) -> None:
        super().__init__(store)
        self.pg = store
        self.opening: tuple[str, ...] | None = opening  # what begins it, until its first statement is sent
        #: writes whose answer nobody waits for (``later``, a few rows of ``many``), each checked
        #: here, bound as text as its message is made: sent ahead of the next statement, or of
        #: the commit, in its message
        self.queued: list[tuple[str, Params]] = []
        self.reserved: int | None = None  # the journal row's id its beginning took (``RESERVING``)
        #: the statements asked for at this point by reads gathered together (``_ask``), and
        #: where their answers come, while the first of them waits for the others to ask theirs
        self._asking: list[tuple[str, Params]] | None = None
        self._answered: asyncio.Future[list[Answer]] | None = None
        self._gathering = 0  # how many ``together`` are under way, whose reads may be asked at once

    @property
    def conn(self) -> psycopg.AsyncConnection[Any]:
        return self.pg.conn

    @property
    def waiting(self) -> bool:
        """Whether something is still to be sent before its next statement."""
        return self.opening is not None or bool(self.queued)

    @staticmethod
    def _checked(sql: str, params: Params) -> tuple[str, Params]:
        """``sql`` as PostgreSQL takes it, its parameters checked as any statement's are (what
        is not Unicode, as it is bound: ``PgStore.bound``)."""
        return translate(sql), _check(params)

    def will_journal(self) -> None:
        if self.opening == WRITE_BEGIN:
            self.opening = RESERVING

    async def journal(self, actor: str, call: str, sid: int | None, args: dict[str, Any], outcome: Any,
                      other: int | None = None, who: str | None = None) -> int:
        """The row waits for the commit, with the id its beginning took; a second row of the
        transaction (one call of a batch after another) is written at once, as elsewhere."""
        if self.opening is not None:
            await self._flush()
        if self.reserved is None:
            return await super().journal(actor, call, sid, args, outcome, other, who)
        row, self.reserved = self.reserved, None
        await self.later(JOURNAL_AT, (row, *self._journal_row(actor, call, sid, args, outcome, other, who)))
        return row

    async def later(self, sql: str, params: Params = ()) -> None:
        self.reaches(sql)
        self.queued.append(self._checked(sql, params))

    async def _flush(self) -> None:
        """Send what waits on its own, before a statement that cannot carry it (bound
        server-side: ``many`` of many rows, ``stream``)."""
        if self.waiting:
            await self._send([])

    async def together(self, *reads: Awaitable[Any]) -> list[Any]:
        """``reads`` asked at once (``_ask``: one message for all); one that fails is raised
        once every one has ended, so that none is left running in a transaction ended for it."""
        self._gathering += 1
        try:
            found = await asyncio.gather(*reads, return_exceptions=True)
        finally:
            self._gathering -= 1
        for one in found:
            if isinstance(one, BaseException):
                raise one
        return found

    async def _ask(self, sql: str, params: Params) -> Answer:
        """What ``sql`` answers. Statements asked for together (``together``'s reads) go in
        one message: the first waits for the others to ask theirs (turns of the event loop,
        until one brings none), then sends them all, one round trip for every one."""
        asked = self._checked(sql, params)
        if not self._gathering:  # asked alone: nothing to wait for
            return (await self._send([asked]))[0]
        if self._asking is not None and self._answered is not None:
            self._asking.append(asked)
            at = len(self._asking) - 1
            return (await self._answered)[at]
        answered: asyncio.Future[list[Answer]] = asyncio.get_running_loop().create_future()
        self._asking, self._answered = [asked], answered
        try:
            while True:  # until a turn of the loop brings none (a read gathered inside one gathered)
                grown = len(self._asking)
                await asyncio.sleep(0)
                if len(self._asking) == grown:
                    break
        finally:
            asking, self._asking = self._asking, None
        try:
            answers = await self._send(asking)
        except BaseException as exc:
            if len(asking) > 1:  # the others asked theirs in it: told the same
                if isinstance(exc, asyncio.CancelledError):
                    answered.cancel()
                else:
                    answered.set_exception(exc)
            raise
        answered.set_result(answers)
        return answers[0]

    async def _send(self, asked: Sequence[tuple[str, Params]]) -> list[Answer]:
        """``asked`` after what waits to be sent (the beginning, then the queued writes), all in
        one message: one round trip. What each of ``asked`` answers."""
        import psycopg

        said, self.queued = [*self.queued, *asked], []
        opening, self.opening = self.opening, None
        async with self._errors():
            if opening is not None:
                return await self.pg._begin(self, opening, said, len(asked))
            cursor = psycopg.AsyncClientCursor(self.conn)
            message = self.pg.message([self.pg.bound(*one) for one in said])
            await self.pg.sent(cursor.execute("; ".join(message)))
            return await _answers(cursor, len(message), len(asked))

    async def execute(self, sql: str, params: Params = ()) -> int:
        self.reaches(sql)
        return (await self._ask(sql, params)).count

    async def clock(self) -> float:
        """The database server's clock (``clock_timestamp``: now, not the transaction's start)."""
        return float(await self.value(SERVER_NOW))

    async def insert(self, sql: str, params: Params = ()) -> int:
        self.reaches(sql)
        rows = (await self._ask(sql + " RETURNING id", params)).rows
        return int(rows[0][0]) if rows else 0

    async def many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """A few rows wait to be sent with the next statement (``later``); more are sent at
        once, bound server-side, in one pipeline, their statement prepared by psycopg for them
        (it prepares nothing else: ``Prepared`` does)."""
        self.reaches(sql)
        batch = list(rows)
        if len(batch) <= QUEUED_ROWS:
            self.queued.extend(self._checked(sql, r) for r in batch)
            return
        checked = [_check(r) for r in batch]
        await self._flush()
        self.conn.prepare_threshold = 0
        try:
            async with self._errors(), self.conn.cursor() as cur:
                await cur.executemany(translate(sql), checked)
        finally:
            self.conn.prepare_threshold = None

    async def all(self, sql: str, params: Params = ()) -> list[Row]:
        self.reaches(sql)  # a write that returns what it wrote is read as rows
        return (await self._ask(sql, params)).rows

    async def tuples(self, sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in await self.all(sql, params)]

    async def stream(self, sql: str, params: Params = (), size: int = 1000) -> AsyncGenerator[list[tuple[Any, ...]], None]:
        import psycopg
        from psycopg.rows import tuple_row

        name = f"stream_{uuid.uuid4().hex}"
        await self._flush()
        async with self._errors():
            cur = self.conn.cursor(name, row_factory=tuple_row)
            await cur.execute(translate(sql), _check(params))
        try:
            while True:
                async with self._errors():
                    found = await cur.fetchmany(size)
                if not found:
                    return
                yield found
        finally:
            with contextlib.suppress(psycopg.Error):  # a connection cut meanwhile: said by the read, if it was
                await cur.close()  # (the transaction's end closes whatever is left, or the server drops it)

    async def defer_references(self) -> None:
        await self.execute("SET CONSTRAINTS ALL DEFERRED")

    async def renumber(self) -> None:
        for (table,) in await self.tuples("SELECT table_name FROM information_schema.columns WHERE table_schema ="
                                          " current_schema() AND column_name = 'id' AND is_identity = 'YES'"):
            await self.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), GREATEST(max(id), 1),"
                               f" max(id) IS NOT NULL) FROM {table}")

    @asynccontextmanager
    async def _errors(self) -> AsyncIterator[None]:
        import psycopg

        try:
            yield
        except UnicodeEncodeError:
            raise InvalidArgument("a text is not valid Unicode (it holds a lone surrogate)") from None
        except psycopg.errors.NumericValueOutOfRange:
            raise InvalidArgument("a number is out of range (integers are 64-bit)") from None
        except psycopg.errors.InsufficientPrivilege:
            raise _read_only(self.store.path) from None
        except psycopg.OperationalError as exc:
            raise cast(PgStore, self.store).unreachable(exc) from None


class PgStore(Store):
    """A workspace in a PostgreSQL database. Create with ``await PgStore.open(url)``."""

    dialect = "postgresql"

    def __init__(self, conn: psycopg.AsyncConnection[Any], url: str, clock: Clock, meta: dict[str, str]) -> None:
        self.conn = conn
        self.url = url
        self.path = safe_url(url)
        self.clock = clock
        self.meta = meta
        self.tokenizer, self.count_tokens = tokens.counter(meta.get("tokenizer", tokens.ESTIMATOR))
        self._lock = asyncio.Lock()
        self.channel = CHANNEL  # this workspace's own, once open
        self._listener: psycopg.AsyncConnection[Any] | None = None
        self._heard = 0
        self._binder: psycopg.AsyncClientCursor[Any] | None = None
        self._prepared = Prepared(conn)

    def binder(self) -> psycopg.AsyncClientCursor[Any]:
        """What binds a statement's parameters as text (``bound``), with the connection's own
        adapters; it needs no live link."""
        import psycopg

        if self._binder is None or self._binder.connection is not self.conn:
            self._binder = psycopg.AsyncClientCursor(self.conn)
            for kind, name in ((int, "int8"), (float, "float8")):
                self._binder.adapters.register_dumper(kind, _typed_literal(name))
        return self._binder

    def bound(self, text: str, params: Params) -> str:
        """A statement (``translate``'s) with its values bound as text, to go in a message of
        several: an ``EXECUTE`` of it prepared, where it can be; else psycopg's binding."""
        try:
            if not isinstance(params, dict) and (statement := self.prepared().execute(text, params)) is not None:
                return statement
            return self.binder().mogrify(text, params)
        except UnicodeEncodeError:
            raise InvalidArgument("a text is not valid Unicode (it holds a lone surrogate)") from None

    def prepared(self) -> Prepared:
        """The statements this connection has prepared (none on one opened again)."""
        if self._prepared.conn is not self.conn:
            self._prepared = Prepared(self.conn)
        return self._prepared

    def message(self, statements: Sequence[str], *, begins: bool = False) -> list[str]:
        """Statements as one message (``Prepared.message``)."""
        return self.prepared().message(statements, begins=begins)

    async def sent(self, message: Coroutine[Any, Any, T]) -> T:
        """``message`` carried out; what it prepared is kept only if it was."""
        prepared = self.prepared()
        try:
            done = await message
        except BaseException:
            prepared.sent(False)
            raise
        prepared.sent(True)
        return done

    @classmethod
    async def open(cls, url: str, *, clock: Clock = time.time, create: bool = True,
                   upgrade: bool = False) -> PgStore:
        """The workspace at ``url``; ``upgrade``: one of an older schema is brought up to date
        (``procession upgrade``), else it is refused: a database is shared, and no call
        changes what every host's engine runs on by itself."""
        conn = await _connect(url)
        try:
            meta, readonly, channel, upgraded = await _prepare(conn, url, create, upgrade)
        except BaseException:
            await conn.close()
            raise
        store = cls(conn, url, clock, meta)
        store.readonly, store.channel, store.upgraded = readonly, channel, upgraded
        return store

    def unreachable(self, exc: Exception) -> StoreUnreachable:
        return StoreUnreachable(f"the workspace database {self.path} cannot be reached ({_first_line(exc)});"
                                " nothing was changed, try again")

    async def close(self) -> None:
        await self.conn.close()
        if self._listener is not None:
            await self._listener.close()

    def same_file(self) -> str | None:
        """A database does not move under an open connection: always None."""
        return None

    async def _reconnect(self) -> None:
        """A connection the server dropped (restarted, or the network cut) is opened again."""
        import psycopg

        if self.conn.closed or self.conn.broken:
            try:
                self.conn = await _connect(self.url, raw=True)
            except psycopg.OperationalError as exc:
                raise self.unreachable(exc) from None

    async def _end(self) -> None:
        """Roll back whatever is open, whatever happens to the caller; a connection that cannot
        is dropped (the next call opens another: the server rolls back what it left)."""
        done = asyncio.ensure_future(self._rollback())
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:
            await asyncio.wait([done])
            raise

    async def _rollback(self) -> None:
        import psycopg

        try:
            await self.conn.execute("ROLLBACK")
        except psycopg.Error:
            await self.conn.close()

    async def _begin(self, tx: PgTx, opening: tuple[str, ...], said: Sequence[tuple[str, Params]],
                     asked: int) -> list[Answer]:
        """Open ``tx`` (``opening``'s statements), with ``said`` (statements to bind as text)
        after them in the same message; what the last ``asked`` of them answer. What the opening
        stamps is the transaction's ``rev``. A connection found dropped here (the server
        restarted since the last call) is opened again and the transaction begun on it:
        nothing had been done yet."""
        import psycopg

        for attempt in (1, 2):
            await self._reconnect()
            cursor = psycopg.AsyncClientCursor(self.conn)
            message = self.message([*(self.bound(one, ()) for one in opening), *(self.bound(*one) for one in said)],
                                   begins=True)
            ahead = len(message) - len(opening) - len(said)  # put after the first, BEGIN
            of = {(at + ahead if at else 0): one for at, one in enumerate(opening)}

            def opened(at: int, value: Sequence[Any]) -> None:
                if at in of:  # the stamp, and the journal row's id it took (``RESERVING``)
                    tx.stamped(int(value[0]))
                    if len(value) > 2:
                        tx.reserved = int(value[2])

            try:
                await self.sent(cursor.execute("; ".join(message)))
                return await _answers(cursor, len(message), asked, opened)
            except asyncio.CancelledError:  # (psycopg has had the server cancel what it was doing)
                await self._end()
                raise
            except psycopg.errors.InsufficientPrivilege:
                await self._end()
                raise _read_only(self.path) from None
            except psycopg.errors.LockNotAvailable:
                await self._end()
                raise StoreBusy(f"the workspace {self.path} stayed locked by another writer for over"
                                f" {BUSY_TIMEOUT_S} s; nothing was changed, try again") from None
            except psycopg.OperationalError as exc:
                await self._end()
                if attempt == 2 or not self.conn.closed:
                    raise self.unreachable(exc) from None
            except psycopg.Error:
                await self._end()
                raise
        raise AssertionError("unreachable")

    @asynccontextmanager
    async def tx(self) -> AsyncIterator[Tx]:
        """A write transaction: all of it commits, or none of it does, even when the task
        running it is cancelled half-way; one at a time across every process (``WRITE_BEGIN``).
        A role that may only read is refused at once, before anything is done."""
        import psycopg

        if self.readonly:  # known since it was opened; a role's rights taken later: refused by its first statement
            raise _read_only(self.path)
        async with self._lock:
            tx = PgTx(self, WRITE_BEGIN)
            try:
                await fenced(tx)
                yield tx
                if tx.followers:
                    await tx.many(JOURNAL[self.dialect], tx.followers)
                if tx.opening is not None:
                    if not tx.queued:  # nothing was said in it: nothing to commit
                        return
                    await tx._flush()  # only writes no one read: begun first, so that a cut is said right
                said, tx.queued = tx.queued, []  # the writes that wait go with it
                message = self.message([*(self.bound(*one) for one in said), self._notify(tx), "COMMIT"])
                try:
                    await self.sent(self.conn.execute("; ".join(message)))
                except psycopg.errors.InsufficientPrivilege:  # a role's rights taken since it began
                    raise _read_only(self.path) from None
                except psycopg.OperationalError as exc:
                    if self.conn.broken or self.conn.closed or (exc.sqlstate or "08").startswith(("08", "57P")):
                        raise StoreUnreachable(f"the workspace database {self.path} was cut off as the call"
                                               f" committed ({_first_line(exc)}): look before trying again, it may"
                                               " have been done") from None
                    # a statement of it refused before the COMMIT ran (a timeout, a limit): nothing was done
                    raise WorkspaceError(f"the workspace database {self.path} refused the call"
                                         f" ({_first_line(exc)}); nothing was changed") from None
            except BaseException:
                await self._end()
                raise

    def _notify(self, tx: Tx) -> str:
        """What tells the other processes of the commit (sent with it: one round trip): the
        hosts whose engines it concerns, when they are known, so that ten hosts' engines do
        not each look at every commit of the other nine (faces hear them all)."""
        if not tx.concerned:  # every host's concern, or no session's: told to all
            return f"NOTIFY {self.channel}"
        return f"NOTIFY {self.channel}, '{' '.join(sorted(tx.concerned))}'"  # host names: [A-Za-z0-9._-] only

    async def atomic(self, body: Callable[[Tx], Coroutine[Any, Any, T]]) -> T:
        async with self.tx() as tx:
            return await body(tx)

    @asynccontextmanager
    async def snapshot(self) -> AsyncIterator[Tx]:
        async with self._lock:
            tx = PgTx(self, SNAPSHOT_BEGIN)
            try:
                yield tx
            finally:
                if tx.opening is None:  # begun
                    await self._end()

    async def data_version(self) -> int:
        """How many commits this process has heard of, from any process (``NOTIFY``): read from
        what the server has sent, no query; a listener the server dropped is opened again."""
        import psycopg

        try:
            return await self._hear()
        except psycopg.Error:  # a listener the server dropped (restarted): another, once
            await self._drop_listener()
        try:
            return await self._hear()
        except psycopg.Error as exc:
            await self._drop_listener()
            raise self.unreachable(exc) from None

    hears = True

    async def hear(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for another commit's ``NOTIFY`` (counted, as
        ``data_version`` counts them); a listener that broke meanwhile is left for
        ``data_version`` to open again, and say if it cannot."""
        import psycopg

        if self._listener is None or self._listener.closed or self._listener.broken:
            return
        try:
            async for told in self._listener.notifies(timeout=timeout):
                if self._concerns(told.payload):
                    self._heard += 1
                    break
        except psycopg.Error:
            await self._drop_listener()

    async def _hear(self) -> int:
        if self._listener is None or self._listener.closed or self._listener.broken:
            self._listener = await _connect(self.url, raw=True)
            await self._listener.execute(f"LISTEN {self.channel}")
            self._heard += 1  # commits missed while not listening count as a change
        async for told in self._listener.notifies(timeout=0):
            self._heard += self._concerns(told.payload)
        return self._heard

    def _concerns(self, payload: str) -> bool:
        """Whether a commit is one this process must look at: every one, but for an engine,
        which looks at those of its own host and those that concern every host."""
        return self.interest is None or not payload or self.interest in payload.split(" ")

    async def _drop_listener(self) -> None:
        if self._listener is not None:
            await self._listener.close()
        self._listener = None


async def _connect(url: str, *, raw: bool = False) -> psycopg.AsyncConnection[Any]:
    """A connection to the workspace's database, its values adapted as SQLite's are; one that
    cannot be made is a one-line ``StoreUnreachable`` (no server answers: it may later) or
    ``WorkspaceError`` (it refused: a role, a password, a database that is not there), or
    (``raw``) psycopg's own error."""
    try:
        import psycopg
    except ImportError:
        raise WorkspaceError("a PostgreSQL workspace needs psycopg: pip install 'psycopg[binary]>=3.2' (or, in the project's"
                             " folder, pip install '.[postgresql]')") from None
    from psycopg.adapt import Dumper, Loader
    from psycopg.pq import Format
    from psycopg.types.numeric import Int8Dumper

    class Number(Loader):
        """``numeric`` (what ``sum`` of integers makes) as SQLite gives it: an int, or a float."""

        def load(self, data: Any) -> int | float:
            text = bytes(data)
            return float(text) if b"." in text or b"e" in text.lower() or b"N" in text else int(text)

    class Flag(Loader):
        """``boolean`` (what a comparison makes) as SQLite gives it: 1 or 0."""

        def load(self, data: Any) -> int:
            return 1 if bytes(data) == b"t" else 0

    class BoolAsInt(Dumper):
        """A Python bool stored as SQLite stores it, an integer (the schema has no boolean)."""

        oid = psycopg.postgres.types["int8"].oid
        format = Format.TEXT

        def dump(self, obj: Any) -> bytes:
            return b"1" if obj else b"0"

    try:
        conn = await psycopg.AsyncConnection.connect(linked(url), autocommit=True, row_factory=_row_factory,
                                                     application_name="procession", prepare_threshold=None)
    except psycopg.OperationalError as exc:
        if raw:
            raise
        if _refused_tls(exc):  # a server that is not the one the address trusts: said, never waited for
            raise WorkspaceError(f"cannot open the workspace database {safe_url(url)}: its server's certificate is"
                                 f" refused ({_first_line(exc)})") from None
        if exc.sqlstate is None or exc.sqlstate.startswith(("08", "57P")):  # no server there, or it is going or coming
            raise StoreUnreachable(f"cannot open the workspace database {safe_url(url)}: it cannot be reached"
                                   f" ({_first_line(exc)})") from None
        raise WorkspaceError(f"cannot open the workspace database {safe_url(url)}: {_first_line(exc)}") from None
    except psycopg.ProgrammingError as exc:
        raise WorkspaceError(f"{safe_url(url)} is not a PostgreSQL address libpq reads: {_first_line(exc)}") from None
    conn.adapters.register_loader("numeric", Number)
    conn.adapters.register_loader("bool", Flag)
    conn.adapters.register_dumper(bool, BoolAsInt)
    conn.adapters.register_dumper(int, Int8Dumper)  # SQLite's one integer type (psycopg picks by size)
    return conn


async def _prepare(conn: psycopg.AsyncConnection[Any], url: str, create: bool,
                   upgrade: bool) -> tuple[dict[str, str], bool, str, Upgraded | None]:
    """The workspace's meta rows, its schema made first in an empty database (``create``);
    whether the role may only read it; the channel its commits notify; and, with ``upgrade``,
    how it was brought up to date. Two first openers make it once (``_CREATOR``); a role that
    may write holds the writers' lock while it looks, so that the one ``upgrade`` brings an
    older workspace up to date while no call writes; a role that may only read takes no lock."""
    where = safe_url(url)
    exists = "SELECT to_regclass('meta') IS NOT NULL"
    async with conn.transaction():
        if not await _first(conn, exists):
            await conn.execute(_CREATOR)
        if await _first(conn, exists) and await _first(conn, "SELECT has_table_privilege('meta', 'UPDATE')"):
            await conn.execute(WRITE_LOCK)
        cur = await conn.execute("SELECT to_regclass('meta') IS NOT NULL,"
                                 " (SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()),"
                                 " current_schema() IS NULL, current_setting('search_path')")
        row = await cur.fetchone()
        assert row is not None
        ours, tables, nowhere, path = row
        if nowhere:  # a search_path naming a schema not made yet
            raise WorkspaceError(f"no schema of {where}'s search_path ({path}) is in the database: make it first"
                                 " (CREATE SCHEMA name AUTHORIZATION role), then open the workspace again")
        if not ours:
            if tables:
                raise WorkspaceError(f"{where} holds tables of another program, not a Procession workspace")
            if not create:
                raise WorkspaceError(f"no workspace at {where} (a spawn or a load makes one)")
            for statement in schema_ddl():
                await conn.execute(statement)
            await conn.cursor().executemany("INSERT INTO meta (key, value) VALUES (%s, %s)", [
                ("uuid", str(uuid.uuid4())), ("created", repr(time.time())), ("tokenizer", tokens.choose()),
                ("rev", "0"), ("schema", str(schema.VERSION))])
        cur = await conn.execute("SELECT has_table_privilege('journal', 'INSERT'),"
                                 " hashtext(current_schema()) & 2147483647")
        row = await cur.fetchone()
        assert row is not None
        readonly = not row[0]
        channel = f"{CHANNEL}{row[1]}"
        cur = await conn.execute("SELECT key, value FROM meta")
        meta = {r[0]: r[1] for r in await cur.fetchall()}
        version = int(meta.get("schema", "0"))
        if version > schema.VERSION:
            raise WorkspaceError(f"{where} was made by a newer Procession (schema {version}; this one knows up to"
                                 f" {schema.VERSION}); upgrade procession to open it")
        upgraded = None
        if version < schema.VERSION:
            if not upgrade:
                raise WorkspaceError(f"{where} is of an older Procession's schema ({version}; this one's is"
                                     f" {schema.VERSION}): a shared workspace is brought up to date only when you say"
                                     " so, once its engines are stopped: procession upgrade")
            upgraded = Upgraded(version, schema.VERSION, await _older_engines(conn, where))
            await _upgrade(conn, where, version, readonly)
            meta["schema"] = str(schema.VERSION)
    return meta, readonly, channel, upgraded


@dataclass(slots=True, frozen=True)
class Upgraded:
    """What ``procession upgrade`` did: the schema it found and the one it left, and the engines
    it found not heard (each may run the older Procession still, somewhere cut off: stop it)."""

    was: int
    now: int
    unheard: tuple[str, ...]


async def _older_engines(conn: psycopg.AsyncConnection[Any], where: str) -> tuple[str, ...]:
    """Refuse to upgrade while an engine (every engine of an older schema is of an older
    Procession) is heard: it would go on running its statements on tables they no longer fit.
    Those not heard are named, for the operator to make sure of."""
    if not await _first(conn, "SELECT to_regclass('engines') IS NOT NULL"):
        return ()  # a workspace older than hosts: one lease, checked as any engine is when it starts
    cur = await conn.execute(f"SELECT host, pid, machine, ({SERVER_NOW}) - heartbeat FROM engines ORDER BY host")
    found = [(f"host {host} (engine pid {pid} on machine {machine})", silent) for host, pid, machine, silent
             in await cur.fetchall()]
    heard = [name for name, silent in found if silent <= hosts.ENGINE_STALE_S]
    if heard:
        raise WorkspaceError(f"engines of an older Procession run on {where}: {', '.join(heard)}; stop them (they"
                             " cannot run on the new schema), upgrade, then start this version's")
    return tuple(name for name, _ in found)


async def _upgrade(conn: psycopg.AsyncConnection[Any], where: str, version: int, readonly: bool) -> None:
    """Bring a workspace made by an older Procession up to this one's schema, in the opening
    transaction (the writer lock held: one opener does it), as SQLite's migrations do."""
    if readonly:
        raise WorkspaceError(f"{where} was made by an older Procession (schema {version}): a role that may write"
                             " must open it once first, to bring it up to date")
    try:
        statements = schema_ddl(version)
    except Unupgradable:
        raise WorkspaceError(f"{where} was made by an older Procession (schema {version}); open it with that one"
                             " and move it with `procession migrate-store` into a new file") from None
    if version < schema.SEARCHED:
        messages = await _first(conn, "SELECT count(*) FROM messages")
        log.info("indexing what was said, for search: %s messages (one statement, the server's)", f"{messages:,}")
    for statement in statements:
        await conn.execute(statement)
    await conn.execute("UPDATE meta SET value = %s WHERE key = 'schema'", (str(schema.VERSION),))


async def _first(conn: psycopg.AsyncConnection[Any], sql: str) -> Any:
    cur = await conn.execute(sql)
    row = await cur.fetchone()
    assert row is not None
    return row[0]


def _read_only(path: object) -> WorkspaceError:
    return WorkspaceError(f"{path} is read-only for this database role; nothing was changed")


def _refused_tls(exc: BaseException) -> bool:
    """Whether libpq refused the server's certificate (``sslmode=verify-ca``/``verify-full``):
    an authority the address does not trust, or a name the certificate does not hold."""
    text = str(exc)
    return "certificate verify failed" in text or "server certificate for" in text and "does not match" in text


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
