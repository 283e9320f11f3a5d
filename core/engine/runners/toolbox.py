"""The tools the ``openai:`` runner offers its model: one set per resource bound to the session.

Each tool is confined to what is bound and to its mode. A folder is opened once, and every
path a tool is given is resolved by the kernel beneath it (``model.beneath``: no ``..`` or
symbolic link leads out, a link to a path that does not exist yet included), and only regular
files are read or written (a FIFO or a device is refused before it is opened); a file's tools
touch that file only; a SQLite database goes through an authorizer (no ``ATTACH``, no
``VACUUM INTO``, no extension; bound ``ro``: opened read-only by SQLite and no statement that
writes); ``ro`` resources have no write tools at all. The file and database tools run on a
worker thread with a deadline, and a search's regular expression has a time limit (the
``regex`` engine, which lets go of the interpreter while it matches): no tool call stalls the
engine. A refusal is the tool's answer (``is_error``), which the model reads and may act on;
it never fails the run. Outputs are bounded (``OUTPUT_MAX``), so what the model is given is
what the history keeps.

Bound MCP servers (``mcp_client``) are started when the toolbox opens and closed with it; a
bound command (``tool NAME=COMMAND``) runs in the session's folder, its own process group,
killed at its timeout or when the run is stopped. Both start within the run's bounds
(``wrap``: the kernel's confinement of the run, ``confinement.Bounds.wrap``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import signal
import sqlite3
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

from ...model import beneath, limits, mcp_binding
from ...model.errors import ProcessionError
from ...model.toolcalls import OUTPUT_MAX
from ..reaper import WAITED, starting

#: A bound command's time limit, and how much of its output is read (the rest is drained).
COMMAND_TIMEOUT_S: Final = 60.0
LIST_MAX: Final = 1000
SEARCH_HITS: Final = 200
QUERY_ROWS: Final = 200
SEARCH_FILE_MAX: Final = 4 * 1024 * 1024
#: The most of a file ``read`` reads (its lines are cut from that).
READ_MAX: Final = 8 * 1024 * 1024
#: How long a file or database tool may take, and a search's matching in all.
FILE_DEADLINE_S: Final = 30.0
SEARCH_DEADLINE_S: Final = 10.0
#: The longest arguments a tool call may have (its record must fit a step's event line).
ARGUMENTS_MAX: Final = 1024 * 1024

Run = Callable[[dict[str, Any]], Awaitable[str]]
#: Asks a person whether a tool call may run: whether it may, and else why not.
Ask = Callable[[str, dict[str, Any]], Awaitable[tuple[bool, str]]]
#: How a process of the run's tools is started within its bounds: the argv it runs instead.
Wrap = Callable[[list[str]], list[str]]


class Refused(Exception):
    """A tool call the binding does not allow, or that cannot be done; its text is the answer."""


@dataclass(slots=True, frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    run: Run
    reads: bool = False  # changes nothing and runs nothing: a session whose permissions are ``ask`` calls it unasked

    def spec(self) -> dict[str, Any]:
        """The tool as a chat-completions request offers it."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}


def bounded(text: str) -> str:
    """``text`` cut at ``OUTPUT_MAX`` bytes, saying how much there was."""
    data = text.encode("utf-8", "replace")
    if len(data) <= OUTPUT_MAX:
        return text
    return data[:OUTPUT_MAX].decode("utf-8", "ignore") + f"\n[… cut: {len(data)} bytes in all]"


def arguments(text: str) -> dict[str, Any]:
    """A tool call's arguments, checked before anything runs: a JSON object that its record
    can hold (nested at most ``limits.JSON_DEPTH`` deep, valid Unicode, at most
    ``ARGUMENTS_MAX`` bytes). What cannot be recorded is refused (``Refused``), never run."""
    if len(text.encode("utf-8", "surrogatepass")) > ARGUMENTS_MAX:
        raise Refused(f"the arguments are over {ARGUMENTS_MAX // 1024} KiB; refused")
    try:
        args = limits.json_loads(text or "{}", "the arguments")
    except limits.NotJson:
        raise Refused("the arguments are not JSON") from None
    except ProcessionError as exc:
        raise Refused(f"{exc}; refused (nothing ran)") from None
    if not isinstance(args, dict):
        raise Refused("the arguments must be a JSON object")
    if not limits.is_unicode(json.dumps(args, ensure_ascii=False)):
        raise Refused("the arguments hold text that is not valid Unicode; refused (nothing ran)")
    return args


def _schema(required: tuple[str, ...] = (), **props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(required)}


_STR = {"type": "string"}
_INT = {"type": "integer"}


def _slug(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", text).strip("_")[:40] or "r"


class Toolbox:
    """The tools of a run, by name; ``call`` answers ``(output, is_error)`` and never raises
    for what a tool does wrong (an MCP server that dies, a bad argument)."""

    def __init__(self) -> None:
        self.tools: dict[str, Tool] = {}

    def add(self, prefix: str, tools: list[Tool]) -> None:
        slug, n = _slug(prefix), 1
        while any(t.name == slug or t.name.startswith(slug + "_") for t in self.tools.values()):
            n += 1
            slug = f"{_slug(prefix)}{n}"
        for tool in tools:
            name = f"{slug}_{tool.name}" if tool.name else slug
            self.tools[name] = Tool(name, tool.description, tool.parameters, tool.run, tool.reads)

    def specs(self) -> list[dict[str, Any]]:
        return [t.spec() for t in self.tools.values()]

    async def call(self, name: str, args: dict[str, Any], ask: Ask | None = None) -> tuple[str, bool]:
        """Run tool ``name`` with ``args`` (as ``arguments`` checked them); with ``ask``, a tool
        that is not a read runs only once a person allows it (a no is the tool's answer)."""
        tool = self.tools.get(name)
        if tool is None:
            return f"no tool named {name!r}; the tools are {', '.join(self.tools) or 'none'}", True
        if ask is not None and not tool.reads:
            ok, why = await ask(name, args)
            if not ok:
                return why, True
        try:
            return bounded(await tool.run(args)), False
        except (Refused, ProcessionError) as exc:
            return str(exc), True
        except (OSError, sqlite3.Error, UnicodeError, KeyError, TypeError, ValueError) as exc:
            return f"{type(exc).__name__}: {exc}", True


@contextlib.asynccontextmanager
async def opened(resources: list[dict[str, Any]], cwd: str, env: dict[str, str],
                 wrap: Wrap = list) -> AsyncIterator[Toolbox]:
    """The toolbox for ``resources``, its MCP servers started (and closed on the way out), its
    folders opened (each path resolved once, here)."""
    box = Toolbox()
    async with contextlib.AsyncExitStack() as stack:
        for r in resources:
            kind, uri, rw = r["kind"], r["uri"], r.get("mode") == "rw"
            if kind == "folder":
                folder = stack.enter_context(beneath.Folder(os.path.realpath(uri), "the bound folder"))
                box.add(Path(uri).name, folder_tools(folder, rw))
            elif kind == "file":
                box.add(Path(uri).name, file_tools(Path(uri), rw))
            elif kind == "sqlite":
                box.add(Path(uri).name, db_tools(Path(uri), rw))
            elif kind == "tool":
                name, command = command_tool(uri, cwd, env, wrap)
                box.add(name, [command])
            elif kind == "mcp":
                from . import mcp_client

                start: Wrap
                if mcp_binding.is_procession(kind, uri):  # Procession itself, holding the session to its scope
                    argv = mcp_binding.server_command(env.get("PROCESSION_DB", ""), int(env["PROCESSION_SESSION"]),
                                                      uri=uri, mode=r.get("mode", "rw"), direct=True)
                    name, target, start = mcp_binding.NAME, "stdio:" + shlex.join(argv), list
                else:
                    name, target, start = mcp_client.name_of(uri), uri, wrap
                box.add(name, await stack.enter_async_context(mcp_client.connected(target, cwd, env, start)))
        yield box


async def _off_loop(work: Callable[..., str], *args: Any) -> str:
    """``work(*args)`` on a worker thread, answered within ``FILE_DEADLINE_S``: the engine's
    loop goes on meanwhile, and the model is told if it took too long."""
    try:
        return await asyncio.wait_for(asyncio.to_thread(work, *args), FILE_DEADLINE_S)
    except TimeoutError:
        raise Refused(f"the tool did not finish within {FILE_DEADLINE_S:g} s; its answer is given up") from None


# ---------------------------------------------------------------------------------------------- files


def _lines(data: bytes, start: int, end: int | None, size: int) -> str:
    text = data.decode("utf-8", "replace")
    cut = f"\n[… the file is {size} bytes; read its first {len(data)}]" if size > len(data) else ""
    if start <= 1 and end is None:
        return text + cut
    lines = text.splitlines()
    start = max(start, 1)
    stop = len(lines) if end is None else min(end, len(lines))
    return "\n".join(lines[start - 1: stop])


def _read_only(what: Path | str) -> Refused:
    return Refused(f"{what} is bound read-only (ro); writing is refused")


def _path(a: dict[str, Any], key: str = "path", default: str | None = None) -> str:
    value = a.get(key, default)
    if not isinstance(value, str) or not value:
        raise Refused(f"{key} must be a path (a string)")
    return value


def _text(a: dict[str, Any], key: str) -> str:
    value = a.get(key)
    if not isinstance(value, str):
        raise Refused(f"{key} must be a string")
    return value


def _line_no(a: dict[str, Any], key: str) -> int | None:
    value = a.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise Refused(f"{key} must be a line number")
    return value


def folder_tools(folder: beneath.Folder, rw: bool) -> list[Tool]:
    root = folder.path
    where = f"in the bound folder {root}"

    def list_(path: str) -> str:
        fd = folder.open(path, os.O_RDONLY | os.O_DIRECTORY)
        shown: list[str] = []
        try:
            with os.scandir(fd) as found:
                entries = sorted(found, key=lambda e: e.name)
            for e in entries[:LIST_MAX]:
                info = e.stat(follow_symlinks=False)
                if stat.S_ISLNK(info.st_mode):
                    shown.append(f"{e.name} -> {os.readlink(e.name, dir_fd=fd)}")
                elif stat.S_ISDIR(info.st_mode):
                    shown.append(f"{e.name}/")
                elif stat.S_ISREG(info.st_mode):
                    shown.append(f"{e.name}  {info.st_size} bytes")
                else:
                    shown.append(f"{e.name}  (not a regular file)")
        finally:
            os.close(fd)
        more = [f"[… {len(entries) - LIST_MAX} more]"] if len(entries) > LIST_MAX else []
        return "\n".join(shown + more) or "(empty)"

    def read(path: str, start: int, end: int | None) -> str:
        fd = folder.regular(path)
        with os.fdopen(fd, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            return _lines(fh.read(READ_MAX), start, end, size)

    def search(pattern: Any, path: str) -> str:
        import time

        deadline = time.monotonic() + SEARCH_DEADLINE_S
        mode = folder.kind(path)
        if mode is None:
            raise Refused(f"{path}: no such file or folder in {root}")
        targets = folder.files(path) if stat.S_ISDIR(mode) else [(beneath.relative(root, path, folder.label), 0)]
        hits: list[str] = []
        for rel, size in targets:
            if size > SEARCH_FILE_MAX:
                continue
            try:
                data = folder.read(rel, SEARCH_FILE_MAX)
            except (OSError, ProcessionError):
                continue  # gone, or became a link or a FIFO since it was listed
            for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
                left = deadline - time.monotonic()
                try:
                    if left <= 0 or pattern.search(line, timeout=left, concurrent=True):
                        if left <= 0:
                            raise TimeoutError
                        hits.append(f"{rel}:{n}: {line}")
                except TimeoutError:
                    raise Refused(f"the search took over {SEARCH_DEADLINE_S:g} s (a pattern that backtracks a lot?);"
                                  f" {len(hits)} matches found before it stopped") from None
                if len(hits) >= SEARCH_HITS:
                    return "\n".join(hits + [f"[stopped at {SEARCH_HITS} matches]"])
        return "\n".join(hits) or "no match"

    def write(path: str, content: str) -> str:
        data = content.encode("utf-8")
        folder.write(path, data)
        return f"wrote {len(data)} bytes to {beneath.relative(root, path, folder.label)}"

    def edit(path: str, old: str, new: str) -> str:
        fd = folder.regular(path)
        with os.fdopen(fd, "rb") as fh:
            text = fh.read().decode("utf-8")
        found = text.count(old)
        if found != 1:
            raise Refused(f"the text to replace occurs {found} times in {path}; it must occur once")
        folder.write(path, text.replace(old, new).encode("utf-8"))
        return f"edited {beneath.relative(root, path, folder.label)}"

    async def list_tool(a: dict[str, Any]) -> str:
        return await _off_loop(list_, _path(a, default="."))

    async def read_tool(a: dict[str, Any]) -> str:
        return await _off_loop(read, _path(a), _line_no(a, "start") or 1, _line_no(a, "end"))

    async def search_tool(a: dict[str, Any]) -> str:
        import regex

        try:
            pattern = regex.compile(_text(a, "pattern"))
        except regex.error as exc:
            raise Refused(f"not a regular expression: {exc}") from None
        return await _off_loop(search, pattern, _path(a, default="."))

    async def write_tool(a: dict[str, Any]) -> str:
        if not rw:
            raise _read_only(root)
        return await _off_loop(write, _path(a), _text(a, "content"))

    async def edit_tool(a: dict[str, Any]) -> str:
        if not rw:
            raise _read_only(root)
        return await _off_loop(edit, _path(a), _text(a, "old"), _text(a, "new"))

    path = {"type": "string", "description": "relative to the folder"}
    tools = [
        Tool("list", f"List a folder {where}.", _schema(path=path), list_tool, reads=True),
        Tool("read", f"Read a file {where}, whole or lines start..end (1-based, inclusive).",
             _schema(("path",), path=path, start=_INT, end=_INT), read_tool, reads=True),
        Tool("search", f"Search the files {where} for a regular expression; answers path:line: text.",
             _schema(("pattern",), pattern=_STR, path=path), search_tool, reads=True),
    ]
    if rw:
        tools += [
            Tool("write", f"Write a whole file {where}.", _schema(("path", "content"), path=path, content=_STR),
                 write_tool),
            Tool("edit", f"Replace one exact occurrence of old by new in a file {where}.",
                 _schema(("path", "old", "new"), path=path, old=_STR, new=_STR), edit_tool),
        ]
    return tools


def file_tools(path: Path, rw: bool) -> list[Tool]:
    """The bound file, by the name it has in its folder (its path resolved when it was bound):
    only a regular file is read or written, and a link put in its place is not followed out."""
    parent, name = os.path.dirname(str(path)), os.path.basename(str(path))

    def read(start: int, end: int | None) -> str:
        with beneath.Folder(parent, "the bound file's folder") as folder:
            fd = folder.regular(name)
        with os.fdopen(fd, "rb") as fh:
            return _lines(fh.read(READ_MAX), start, end, os.fstat(fh.fileno()).st_size)

    def write(content: str) -> str:
        data = content.encode("utf-8")
        with beneath.Folder(parent, "the bound file's folder") as folder:
            folder.write(name, data)
        return f"wrote {len(data)} bytes to {path}"

    async def read_tool(a: dict[str, Any]) -> str:
        return await _off_loop(read, _line_no(a, "start") or 1, _line_no(a, "end"))

    async def write_tool(a: dict[str, Any]) -> str:
        if not rw:
            raise _read_only(path)
        return await _off_loop(write, _text(a, "content"))

    tools = [Tool("read", f"Read the bound file {path}, whole or lines start..end (1-based, inclusive).",
                  _schema(start=_INT, end=_INT), read_tool, reads=True)]
    if rw:
        tools.append(Tool("write", f"Replace the content of the bound file {path}.",
                          _schema(("content",), content=_STR), write_tool))
    return tools


# ---------------------------------------------------------------------------------------------- databases

#: What a statement on a read-only binding may do (any other action is denied).
_READING = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE,
                      sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT})
#: Pragmas a read-only binding may read (with no value given).
_READ_PRAGMAS = frozenset({"table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
                           "foreign_key_list", "user_version", "schema_version", "application_id", "page_count",
                           "page_size", "freelist_count", "encoding", "collation_list", "function_list",
                           "pragma_list", "integrity_check", "quick_check", "foreign_key_check", "journal_mode"})
#: Functions no binding may call: they reach files outside the database.
_FILE_FUNCTIONS = frozenset({"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"})
#: Pragmas no binding may set: where SQLite puts its files.
_FILE_PRAGMAS = frozenset({"temp_store_directory", "data_store_directory"})


def authorizer(rw: bool) -> Callable[[int, str | None, str | None, str | None, str | None], int]:
    """SQLite's authorizer for a bound database: never ``ATTACH`` (nor ``VACUUM INTO``, which
    attaches its target: both make or open files anywhere) but a temporary one, never a
    function that reads or writes files or loads code; read-only (``rw`` false): reading
    statements only."""

    def allow(action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None) -> int:
        if action == sqlite3.SQLITE_ATTACH:
            return sqlite3.SQLITE_OK if rw and not arg1 else sqlite3.SQLITE_DENY  # '': VACUUM's own temporary one
        if action == sqlite3.SQLITE_DETACH:
            return sqlite3.SQLITE_OK if rw else sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _FILE_FUNCTIONS:
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_PRAGMA:
            name = (arg1 or "").lower()
            if name in _FILE_PRAGMAS:
                return sqlite3.SQLITE_DENY
            return sqlite3.SQLITE_OK if rw or (arg2 is None and name in _READ_PRAGMAS) else sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK if rw or action in _READING else sqlite3.SQLITE_DENY

    return allow


def db_tools(path: Path, rw: bool) -> list[Tool]:
    """A bound SQLite database, by the file it is (its path resolved when it was bound):
    read-write (made on first use when it does not exist), or read-only at the file level
    (``ro``); every statement through ``authorizer``. SQLite opens it by name, so before each
    connection the name must still lead to itself, a regular file (or nothing yet): a link put
    in its place since is refused, not followed."""
    real = str(path)

    def connect() -> sqlite3.Connection:
        try:
            mode = os.lstat(real).st_mode
        except FileNotFoundError:
            mode = None
        if (mode is not None and not stat.S_ISREG(mode)) or os.path.realpath(real) != real:
            raise Refused(f"{path} is no longer the regular file it was bound as (a link or something else now);"
                          " refused")
        if mode is None and not rw:
            raise Refused(f"{path} does not exist")
        db = sqlite3.connect(f"file:{quote(real)}?mode={'rwc' if rw else 'ro'}", uri=True, timeout=5)
        db.set_authorizer(authorizer(rw))
        if not rw:
            db.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        return db

    def schema() -> str:
        with contextlib.closing(connect()) as db:
            found = db.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name").fetchall()
        return "\n".join(r[0] + ";" for r in found) or "(no tables)"

    def query(sql: str, params: list[Any]) -> str:
        with contextlib.closing(connect()) as db:
            try:
                cur = db.execute(sql, params)
            except sqlite3.DatabaseError as exc:
                if any(word in str(exc) for word in ("authoriz", "readonly", "too many attached")):
                    allowed = "reading statements" if not rw else "statements on this database (no ATTACH, VACUUM" \
                                                                  " INTO, file functions or extensions)"
                    raise Refused(f"{path} is bound {'rw' if rw else 'read-only (ro)'}: only {allowed} run"
                                  f" ({exc})") from exc
                raise
            rows = cur.fetchmany(QUERY_ROWS + 1)
            db.commit()
            if cur.description is None:
                return f"ok, {cur.rowcount} rows changed" if cur.rowcount >= 0 else "ok"
            head = "\t".join(d[0] for d in cur.description)
            body = ["\t".join("NULL" if v is None else str(v) for v in r) for r in rows[:QUERY_ROWS]]
            more = [f"[… more rows; only the first {QUERY_ROWS} shown]"] if len(rows) > QUERY_ROWS else []
            return "\n".join([head, *body, *more])

    async def schema_(a: dict[str, Any]) -> str:
        return await _off_loop(schema)

    async def query_(a: dict[str, Any]) -> str:
        params = a.get("params") or []
        if not isinstance(params, list):
            raise Refused("params must be a list")
        return await _off_loop(query, _text(a, "sql"), params)

    kind = "any SQL statement" if rw else "a reading SQL statement (the database is bound read-only)"
    return [Tool("schema", f"The tables of the SQLite database {path.name}.", _schema(), schema_, reads=True),
            Tool("query", f"Run {kind} on {path.name}; answers tab-separated rows.",
                 _schema(("sql",), sql=_STR, params={"type": "array", "items": {}}), query_, reads=not rw)]


# ---------------------------------------------------------------------------------------------- commands


def command_tool(uri: str, cwd: str, env: dict[str, str], wrap: Wrap = list) -> tuple[str, Tool]:
    """``NAME=COMMAND`` as a tool taking extra arguments (words, never a shell line) and stdin,
    started within the run's bounds (``wrap``)."""
    name, _, line = uri.partition("=")
    argv = shlex.split(line) if line else shlex.split(name)
    if not line:
        name = Path(argv[0]).name if argv else "tool"
    timeout = float(env.get("PROCESSION_TOOL_TIMEOUT", COMMAND_TIMEOUT_S))

    async def run(a: dict[str, Any]) -> str:
        args = a.get("args") or []
        if not isinstance(args, list):
            raise Refused("args must be a list of words")
        stdin = a.get("stdin")
        if stdin is not None and not isinstance(stdin, str):
            raise Refused("stdin must be a string")
        with starting():  # until it has exec'd with the run's marker, no reaper takes it for an orphan
            proc = await asyncio.create_subprocess_exec(
                *wrap([*argv, *map(str, args)]), cwd=cwd, env=env, start_new_session=True,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
            WAITED.add(proc.pid)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin is not None else None), timeout)
        except TimeoutError:
            _kill(proc)
            await proc.wait()
            raise Refused(f"{name} did not finish within {timeout:g} s; killed") from None
        except BaseException:  # the run was stopped: the command goes with it
            _kill(proc)
            raise
        finally:
            WAITED.discard(proc.pid)
        text = out.decode("utf-8", "replace")
        if proc.returncode:
            raise Refused(f"{text}\n[exit status {proc.returncode}]".lstrip())
        return text or "(no output)"

    return name, Tool("", f"Run the bound command `{line or name}` in the session's folder, with extra arguments.",
                      _schema(args={"type": "array", "items": _STR}, stdin=_STR), run)


def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
