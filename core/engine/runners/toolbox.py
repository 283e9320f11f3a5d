"""The tools the ``openai:`` runner offers its model: one set per resource bound to the session.

Each tool is confined to what is bound and to its mode: a folder's tools resolve every path
inside the folder (a symlink leading out is refused, as is ``..``), a file's tools touch only
that file, a database opened ``ro`` is opened read-only by SQLite itself (a write is refused
by the engine, not by parsing the statement), and ``ro`` resources have no write tools at
all. A refusal is the tool's answer (``is_error``), which the model reads and may act on; it
never fails the run. Outputs are bounded (``OUTPUT_MAX``), so what the model is given is what
the history keeps.

Bound MCP servers (``mcp_client``) are started when the toolbox opens and closed with it; a
bound command (``tool NAME=COMMAND``) runs in the session's folder, its own process group,
killed at its timeout or when the run is stopped.
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
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ...model import mcp_binding
from ...model.toolcalls import OUTPUT_MAX

#: A bound command's time limit, and how much of its output is read (the rest is drained).
COMMAND_TIMEOUT_S: Final = 60.0
LIST_MAX: Final = 1000
SEARCH_HITS: Final = 200
QUERY_ROWS: Final = 200
SEARCH_FILE_MAX: Final = 4 * 1024 * 1024

Run = Callable[[dict[str, Any]], Awaitable[str]]


class Refused(Exception):
    """A tool call the binding does not allow, or that cannot be done; its text is the answer."""


@dataclass(slots=True, frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    run: Run

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
            self.tools[name] = Tool(name, tool.description, tool.parameters, tool.run)

    def specs(self) -> list[dict[str, Any]]:
        return [t.spec() for t in self.tools.values()]

    async def call(self, name: str, arguments: str) -> tuple[str, bool]:
        tool = self.tools.get(name)
        if tool is None:
            return f"no tool named {name!r}; the tools are {', '.join(self.tools) or 'none'}", True
        try:
            args = json.loads(arguments or "{}")
        except ValueError:
            return "the arguments are not JSON", True
        if not isinstance(args, dict):
            return "the arguments must be a JSON object", True
        try:
            return bounded(await tool.run(args)), False
        except Refused as exc:
            return str(exc), True
        except (OSError, sqlite3.Error, UnicodeError, KeyError, TypeError, ValueError) as exc:
            return f"{type(exc).__name__}: {exc}", True


@contextlib.asynccontextmanager
async def opened(resources: list[dict[str, Any]], cwd: str, env: dict[str, str]) -> AsyncIterator[Toolbox]:
    """The toolbox for ``resources``, its MCP servers started (and closed on the way out)."""
    box = Toolbox()
    async with contextlib.AsyncExitStack() as stack:
        for r in resources:
            kind, uri, rw = r["kind"], r["uri"], r.get("mode") == "rw"
            if kind == "folder":
                box.add(Path(uri).name, folder_tools(Path(uri), rw))
            elif kind == "file":
                box.add(Path(uri).name, file_tools(Path(uri), rw))
            elif kind in ("db", "sqlite"):
                box.add(Path(uri).name, db_tools(Path(uri), rw))
            elif kind == "tool":
                name, command = command_tool(uri, cwd, env)
                box.add(name, [command])
            elif kind == "mcp":
                from . import mcp_client

                if mcp_binding.is_procession(kind, uri):
                    argv = mcp_binding.server_command(env.get("PROCESSION_DB", ""), int(env["PROCESSION_SESSION"]),
                                                      uri=uri, mode=r.get("mode", "rw"))
                    name, target = mcp_binding.NAME, "stdio:" + shlex.join(argv)
                else:
                    name, target = mcp_client.name_of(uri), uri
                box.add(name, await stack.enter_async_context(mcp_client.connected(target, cwd, env)))
        yield box


# ---------------------------------------------------------------------------------------------- paths


def inside(root: Path, path: str, *, new: bool = False) -> Path:
    """``path`` (relative to ``root``, or absolute) resolved, refused unless it stays inside
    ``root``; ``new``: it may not exist yet (its folder must)."""
    base = root.resolve()
    given = Path(path)
    target = given if given.is_absolute() else base / given
    if new and not target.exists():
        resolved = target.parent.resolve() / target.name
    else:
        resolved = target.resolve()
    if resolved != base and base not in resolved.parents:
        plain = Path(os.path.normpath(target))
        if plain == base or base in plain.parents:
            raise Refused(f"{path}: a symbolic link leads out of the bound folder; refused")
        raise Refused(f"{path}: outside the bound folder {root}; refused")
    return resolved


def _lines(path: Path, start: int, end: int | None) -> str:
    text = path.read_text("utf-8", "replace")
    lines = text.splitlines()
    start = max(start, 1)
    stop = len(lines) if end is None else min(end, len(lines))
    return "\n".join(lines[start - 1: stop]) if start > 1 or end is not None else text


def _read_only(what: Path) -> Refused:
    return Refused(f"{what} is bound read-only (ro); writing is refused")


def folder_tools(root: Path, rw: bool) -> list[Tool]:
    where = f"in the bound folder {root}"

    async def list_(a: dict[str, Any]) -> str:
        folder = inside(root, a.get("path") or ".")
        entries = sorted(folder.iterdir())
        shown = [f"{p.name}/" if p.is_dir() else f"{p.name}  {p.stat().st_size} bytes" for p in entries[:LIST_MAX]]
        more = [f"[… {len(entries) - LIST_MAX} more]"] if len(entries) > LIST_MAX else []
        return "\n".join(shown + more) or "(empty)"

    async def read(a: dict[str, Any]) -> str:
        return _lines(inside(root, a["path"]), int(a.get("start") or 1), a.get("end"))

    async def search(a: dict[str, Any]) -> str:
        pattern = re.compile(a["pattern"])
        base = inside(root, a.get("path") or ".")
        hits: list[str] = []
        for path in sorted(base.rglob("*")) if base.is_dir() else [base]:
            if not path.is_file() or path.is_symlink() or path.stat().st_size > SEARCH_FILE_MAX:
                continue
            for n, line in enumerate(path.read_text("utf-8", "replace").splitlines(), 1):
                if pattern.search(line):
                    hits.append(f"{path.relative_to(root.resolve())}:{n}: {line}")
                    if len(hits) >= SEARCH_HITS:
                        return "\n".join(hits + [f"[stopped at {SEARCH_HITS} matches]"])
        return "\n".join(hits) or "no match"

    async def write(a: dict[str, Any]) -> str:
        if not rw:
            raise _read_only(root)
        path = inside(root, a["path"], new=True)
        path.write_text(a["content"], "utf-8")
        return f"wrote {len(a['content'].encode())} bytes to {path.relative_to(root.resolve())}"

    async def edit(a: dict[str, Any]) -> str:
        if not rw:
            raise _read_only(root)
        path = inside(root, a["path"])
        text = path.read_text("utf-8")
        found = text.count(a["old"])
        if found != 1:
            raise Refused(f"the text to replace occurs {found} times in {a['path']}; it must occur once")
        path.write_text(text.replace(a["old"], a["new"]), "utf-8")
        return f"edited {path.relative_to(root.resolve())}"

    path = {"type": "string", "description": "relative to the folder"}
    tools = [
        Tool("list", f"List a folder {where}.", _schema(path=path), list_),
        Tool("read", f"Read a file {where}, whole or lines start..end (1-based, inclusive).",
             _schema(("path",), path=path, start=_INT, end=_INT), read),
        Tool("search", f"Search the files {where} for a regular expression; answers path:line: text.",
             _schema(("pattern",), pattern=_STR, path=path), search),
    ]
    if rw:
        tools += [
            Tool("write", f"Write a whole file {where}.", _schema(("path", "content"), path=path, content=_STR), write),
            Tool("edit", f"Replace one exact occurrence of old by new in a file {where}.",
                 _schema(("path", "old", "new"), path=path, old=_STR, new=_STR), edit),
        ]
    return tools


def file_tools(path: Path, rw: bool) -> list[Tool]:
    async def read(a: dict[str, Any]) -> str:
        return _lines(path, int(a.get("start") or 1), a.get("end"))

    async def write(a: dict[str, Any]) -> str:
        if not rw:
            raise _read_only(path)
        path.write_text(a["content"], "utf-8")
        return f"wrote {len(a['content'].encode())} bytes to {path}"

    tools = [Tool("read", f"Read the bound file {path}, whole or lines start..end (1-based, inclusive).",
                  _schema(start=_INT, end=_INT), read)]
    if rw:
        tools.append(Tool("write", f"Replace the content of the bound file {path}.",
                          _schema(("content",), content=_STR), write))
    return tools


def db_tools(path: Path, rw: bool) -> list[Tool]:
    def connect() -> sqlite3.Connection:
        if rw:
            return sqlite3.connect(path, timeout=5)
        return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5)

    def schema() -> str:
        with contextlib.closing(connect()) as db:
            found = db.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name").fetchall()
        return "\n".join(r[0] + ";" for r in found) or "(no tables)"

    def query(sql: str, params: list[Any]) -> str:
        with contextlib.closing(connect()) as db:
            try:
                cur = db.execute(sql, params)
            except sqlite3.OperationalError as exc:
                if "readonly" in str(exc):
                    raise Refused(f"{path} is bound read-only (ro): only reading statements run ({exc})") from exc
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
        return await asyncio.to_thread(schema)

    async def query_(a: dict[str, Any]) -> str:
        return await asyncio.to_thread(query, a["sql"], list(a.get("params") or []))

    kind = "any SQL statement" if rw else "a reading SQL statement (the database is bound read-only)"
    return [Tool("schema", f"The tables of the SQLite database {path.name}.", _schema(), schema_),
            Tool("query", f"Run {kind} on {path.name}; answers tab-separated rows.",
                 _schema(("sql",), sql=_STR, params={"type": "array", "items": {}}), query_)]


# ---------------------------------------------------------------------------------------------- commands


def command_tool(uri: str, cwd: str, env: dict[str, str]) -> tuple[str, Tool]:
    """``NAME=COMMAND`` as a tool taking extra arguments (words, never a shell line) and stdin."""
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
        proc = await asyncio.create_subprocess_exec(
            *argv, *map(str, args), cwd=cwd, env=env, start_new_session=True,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin is not None else None), timeout)
        except TimeoutError:
            _kill(proc)
            await proc.wait()
            raise Refused(f"{name} did not finish within {timeout:g} s; killed") from None
        except BaseException:  # the run was stopped: the command goes with it
            _kill(proc)
            raise
        text = out.decode("utf-8", "replace")
        if proc.returncode:
            raise Refused(f"{text}\n[exit status {proc.returncode}]".lstrip())
        return text or "(no output)"

    return name, Tool("", f"Run the bound command `{line or name}` in the session's folder, with extra arguments.",
                      _schema(args={"type": "array", "items": _STR}, stdin=_STR), run)


def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
