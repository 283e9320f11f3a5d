"""opencode's session store: one SQLite database for every session (``opencode.db`` in its
data folder), tables ``session``, ``message`` (one row per user prompt or model step, its JSON
in ``data``) and ``part`` (a message's text, tool call, reasoning, step marks).

The database is in WAL mode and the CLI may be writing it while Procession reads: it is opened
read-only, with a short busy timeout, a connection per statement (its own snapshot; no
transaction is left open). Messages are ordered as opencode orders them, by ``time_created`` then
id: ids are a millisecond clock (modulo 2^48) and a counter, but a fork copies messages under
new ids with their old times, so ids alone do not say the order.

A session travels as the JSON ``opencode export`` prints (``{info, messages: [{info,
parts}]}``), built here from the rows without starting the CLI; ``opencode import`` takes it
back under the same ids, in the folder it is started in (it ignores the file's directory).
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import string
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from typing import Any

from .. import agents
from ..errors import InvalidArgument
from ..toolcalls import summary, tool_message
from .base import Differs, Found, Position, Said, Transcript, remap

CLI = "opencode"
#: How long a read waits for a writer that holds the database (WAL readers rarely wait).
BUSY_S = 1.0
#: How long ``opencode import`` may take: a hang guard only (opencode's start alone took
#: 20-45 s on a loaded 2-core machine).
IMPORT_S = 600.0


def database(env: Mapping[str, str]) -> str:
    """Where opencode under ``env`` keeps its sessions: ``$OPENCODE_DB`` (absolute, or in its
    data folder), else ``opencode.db`` in ``$XDG_DATA_HOME/opencode`` (``~/.local/share``)."""
    data = os.path.join(env.get("XDG_DATA_HOME") or os.path.join(env.get("HOME", "~"), ".local", "share"), "opencode")
    named = env.get("OPENCODE_DB")
    return os.path.expanduser(os.path.join(data, named) if named else os.path.join(data, "opencode.db"))


def query(path: str, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The rows of one statement over opencode's database, opened read-only; a file that is not
    opencode's (or is not there) is refused in one line."""
    if not os.path.isfile(path):
        raise InvalidArgument(f"no opencode database at {path}")
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_S, isolation_level=None)
    except sqlite3.Error as error:
        raise InvalidArgument(f"{path} cannot be opened as opencode's database: {error}") from None
    try:
        return con.execute(sql, args).fetchall()
    except sqlite3.OperationalError as error:
        if "locked" in str(error) or "busy" in str(error):
            raise InvalidArgument(f"opencode's database {path} is busy; try again") from None
        raise InvalidArgument(f"{path} is not opencode's database ({error})") from None
    except sqlite3.DatabaseError as error:
        raise InvalidArgument(f"{path} is not opencode's database ({error})") from None
    finally:
        con.close()


def session_made(path: str, directory: str, since_ms: int, other: str = "") -> str | None:
    """The newest session made in ``directory`` since ``since_ms`` (not ``other``): the one a run
    stopped before it named its session made (the runner's guess; see its ``closing``)."""
    try:
        rows = query(path, "SELECT id FROM session WHERE directory = ? AND time_created >= ? AND id != ?"
                           " ORDER BY time_created DESC LIMIT 1", (directory, since_ms, other))
    except InvalidArgument:
        return None
    return str(rows[0][0]) if rows else None


def step_usage(tokens: Mapping[str, Any]) -> tuple[int, int, int, int, int]:
    """A step's ``tokens`` (a ``step-finish`` part, or its event) as input, output (reasoning
    included), cache read, cache write, and the agent's context after it (``total``, else the
    sum)."""
    cache = tokens.get("cache") or {}
    tin, out = int(tokens.get("input") or 0), int(tokens.get("output") or 0) + int(tokens.get("reasoning") or 0)
    read, write = int(cache.get("read") or 0), int(cache.get("write") or 0)
    total = int(tokens.get("total") or 0) or int(tokens.get("input") or 0) + int(tokens.get("output") or 0) + read + write
    return tin, out, read, write, total


def tool_call(part: Mapping[str, Any]) -> tuple[str, str, Any, str | None, bool, dict[str, Any]]:
    """A tool part (or a ``tool_use`` event's part) as call id, tool, input, output (None: it
    never finished, its run was stopped), whether it failed (an error, or a non-zero exit),
    and the meta kept beside it (the exit code)."""
    state = part.get("state") or {}
    status = state.get("status")
    exit_code = (state.get("metadata") or {}).get("exit")
    output: str | None
    if status == "completed":
        output, failed = str(state.get("output") or ""), exit_code not in (0, None)
    elif status == "error":
        output, failed = str(state.get("error") or ""), True
    else:
        output, failed = None, True
    return (str(part.get("callID") or part.get("id")), str(part.get("tool")), state.get("input"), output, failed,
            {"exit_code": exit_code} if exit_code is not None else {})


def _seconds(ms: Any) -> float | None:
    return ms / 1000 if isinstance(ms, int | float) and ms else None


def _loads(text: str) -> dict[str, Any]:
    try:
        found = json.loads(text)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _model(info: Mapping[str, Any]) -> str:
    """``PROVIDER/MODEL`` of a message (what ``-m`` takes), or of the session's ``model``."""
    provider = info.get("providerID")
    model = info.get("modelID") or info.get("id")
    return f"{provider}/{model}" if provider and model else ""


SESSION_COLUMNS = ("id, project_id, workspace_id, parent_id, slug, directory, path, title, version, share_url,"
                   " summary_additions, summary_deletions, summary_files, summary_diffs, metadata, cost, tokens_input,"
                   " tokens_output, tokens_reasoning, tokens_cache_read, tokens_cache_write, revert, permission,"
                   " agent, model, time_created, time_updated, time_compacting, time_archived")


def _info(row: tuple[Any, ...]) -> dict[str, Any]:
    """A session row as opencode's own ``Session.Info`` (what ``export`` prints): the same
    mapping as the CLI's, fields it leaves undefined left out."""
    (sid, project, workspace, parent, slug, directory, path, title, version, share_url, additions, deletions, files,
     diffs, metadata, cost, t_in, t_out, t_reason, t_read, t_write, revert, permission, agent, model,
     created, updated, compacting, archived) = row
    info: dict[str, Any] = {"id": sid, "slug": slug, "projectID": project, "workspaceID": workspace,
                            "directory": directory, "path": path, "parentID": parent, "title": title, "agent": agent,
                            "model": json.loads(model) if model else None, "version": version}
    if additions is not None or deletions is not None or files is not None:
        info["summary"] = {"additions": additions or 0, "deletions": deletions or 0, "files": files or 0,
                           "diffs": json.loads(diffs) if diffs else None}
    info |= {"cost": cost, "tokens": {"input": t_in, "output": t_out, "reasoning": t_reason,
                                      "cache": {"read": t_read, "write": t_write}},
             "share": {"url": share_url} if share_url else None, "metadata": json.loads(metadata) if metadata else None,
             "revert": json.loads(revert) if revert else None,
             "permission": json.loads(permission) if permission else None,
             "time": {"created": created, "updated": updated, "compacting": compacting, "archived": archived}}
    defined: dict[str, Any] = _defined(info)
    return defined


def _defined(value: Any) -> Any:
    """``value`` without the None members of its objects (JSON has no ``undefined``)."""
    if isinstance(value, dict):
        return {k: _defined(v) for k, v in value.items() if v is not None}
    return value


def _session(path: str, ident: str) -> tuple[Any, ...] | None:
    rows = query(path, f"SELECT {SESSION_COLUMNS} FROM session WHERE id = ?", (ident,))
    return rows[0] if rows else None


def _messages(path: str, session: str, last: str = "") -> tuple[list[tuple[str, int, dict[str, Any], list[dict[str, Any]]]], bool]:
    """The session's messages after message ``last`` (id, time, info, parts), in order, and
    whether ``last`` is still there (when it is not, every message is returned)."""
    since = query(path, "SELECT time_created FROM message WHERE id = ? AND session_id = ?", (last, session)) if last else []
    rows = query(path, "SELECT m.id, m.time_created, m.data, p.id, p.data FROM message m"
                       " LEFT JOIN part p ON p.message_id = m.id WHERE m.session_id = ? AND (m.time_created, m.id) > (?, ?)"
                       " ORDER BY m.time_created, m.id, p.id", (session, since[0][0] if since else -1, last if since else ""))
    out: list[tuple[str, int, dict[str, Any], list[dict[str, Any]]]] = []
    for mid, created, data, pid, pdata in rows:
        if not out or out[-1][0] != mid:
            out.append((mid, created, _loads(data), []))
        if pid is not None:
            out[-1][3].append({**_loads(pdata), "id": pid})
    return out, bool(since) or not last


class Opencode:
    """opencode's sessions (see the module's docstring)."""

    cli = CLI

    def kept(self, env: Mapping[str, str]) -> str:
        return database(env)

    def discover(self, env: Mapping[str, str]) -> Iterator[Found]:
        path = database(env)
        if not os.path.isfile(path):
            return
        for sid, directory, updated in query(path, "SELECT id, directory, time_updated FROM session"
                                                   " ORDER BY time_updated DESC, id"):
            yield Found(CLI, sid, path, directory, updated / 1000)

    def find(self, env: Mapping[str, str], ident: str) -> Found:
        """By id, or an unambiguous prefix of one (``ses_`` may be left out); a path names the
        database, which must then hold exactly one session."""
        path = database(env)
        if os.path.isfile(ident):
            path, rows = ident, query(ident, "SELECT id, directory, time_updated FROM session LIMIT 2")
            if len(rows) != 1:
                raise InvalidArgument(f"{ident} holds {'no' if not rows else 'several'} opencode sessions:"
                                      " name one by its id")
        else:
            prefix = ident if ident.startswith("ses_") else f"ses_{ident}"
            if not os.path.isfile(path):
                raise InvalidArgument(f"no opencode session {ident!r}: there is no opencode database at {path}")
            # ids are ASCII letters, digits and "_", all before "~": a range the primary key serves
            rows = query(path, "SELECT id, directory, time_updated FROM session WHERE id >= ? AND id < ? LIMIT 2",
                         (prefix, prefix + "~"))
            if len(rows) != 1:
                raise InvalidArgument(f"no opencode session {ident!r} in {path}" if not rows else
                                      f"opencode session {ident!r} is ambiguous in {path}: give more of its id")
        sid, directory, updated = rows[0]
        return Found(CLI, sid, path, directory, updated / 1000)

    def read(self, found: Found, position: Position | None = None) -> Transcript:
        """User and assistant text (synthetic parts left out), and each tool part as one tool
        message; reasoning and step marks are not messages. Usage is summed over the steps read
        (``step-finish`` parts), as the runner sums its ``step_finish`` events. The newest
        message is left for the next read while it is being written: a step without its
        ``completed`` time, a prompt without its parts. One that is not the newest is read as
        it stands: a run killed mid-step never completes its step, and the session went on. A
        position whose message is gone (the session was reverted in the CLI) reads the whole
        session, ``branched``."""
        last = (position or Position()).last
        row = _session(found.path, found.id)
        if row is None:
            raise InvalidArgument(f"no opencode session {found.id} in {found.path}")
        info = _info(row)
        messages, passed = _messages(found.path, found.id, last)
        out = Transcript(CLI, found.id, found.path, cwd=info["directory"], model=_model(info.get("model") or {}),
                         title=info.get("title", ""), started=_seconds(info["time"]["created"]),
                         position=Position(last=last if passed else ""), branched=not passed)
        for index, (mid, created, data, parts) in enumerate(messages):
            role, newest = data.get("role"), index == len(messages) - 1
            if newest and (not parts if role == "user" else not (data.get("time") or {}).get("completed")):
                break
            self._message(out, data, parts, _seconds(created))
            out.position = Position(last=mid)
        return out

    @staticmethod
    def _message(out: Transcript, data: Mapping[str, Any], parts: list[dict[str, Any]], at: float | None) -> None:
        if data.get("role") == "user":
            text = "\n\n".join(str(p.get("text", "")) for p in parts if p.get("type") == "text"
                               and not p.get("synthetic") and str(p.get("text", "")).strip())
            if text:
                out.messages.append(Said("user", text, None, at))
            return
        out.model = _model(data) or out.model
        for part in parts:
            kind, times = part.get("type"), part.get("time") or (part.get("state") or {}).get("time") or {}
            ts = _seconds(times.get("end") or times.get("start")) or at
            if kind == "text" and not part.get("synthetic") and str(part.get("text", "")).strip():
                out.messages.append(Said("assistant", str(part["text"]), None, ts))
            elif kind == "tool":
                call_id, name, value, output, failed, meta = tool_call(part)
                out.messages.append(Said(*tool_message(call_id, name, value, output, failed, **meta), ts))
            elif kind == "step-finish":
                tin, tout, read, write, total = step_usage(part.get("tokens") or {})
                out.tokens_in += tin
                out.tokens_out += tout
                out.cache_read += read
                out.cache_write += write
                if total:
                    out.context = (total, None)
        error = data.get("error")
        if isinstance(error, dict):
            out.problems.append(f"opencode: {(error.get('data') or {}).get('message') or error.get('name') or 'an error'}")

    def carry(self, ref: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any] | None:
        """The session as ``opencode export`` prints it, built from the rows."""
        path = str(ref.get("transcript") or database(env))
        if not os.path.isfile(path):
            return None
        row = _session(path, str(ref["id"]))
        if row is None:
            return None
        messages, _ = _messages(path, str(ref["id"]))
        return {"info": _info(row), "messages": [
            {"info": {**data, "id": mid, "sessionID": ref["id"]},
             "parts": [{**{k: v for k, v in p.items() if k != "id"}, "id": p["id"], "sessionID": ref["id"],
                        "messageID": mid} for p in parts]} for mid, _, data, parts in messages]}

    def place(self, carried: Mapping[str, Any], env: Mapping[str, str], cwd: str,
              mapping: Mapping[str, str]) -> dict[str, Any]:
        """``opencode import`` of the carried JSON, started in ``cwd`` (the folder it gives the
        session), each step's recorded folder rewritten by ``mapping``. A session of the same id
        already here, in ``cwd``, is taken as it is when it holds every carried message, and
        brought up to date when it holds an earlier part of them (it was moved away and went on
        there: the import adds the rest); one that went another way is ``Differs``."""
        info, messages = carried.get("info"), carried.get("messages")
        if not isinstance(info, dict) or not str(info.get("id", "")).startswith("ses_") or not isinstance(messages, list):
            raise InvalidArgument("the carried opencode session is not an opencode export (no info.id, no messages)")
        sid, path = str(info["id"]), database(env)
        already = False
        if os.path.isfile(path) and (row := _session(path, sid)) is not None:
            already = _earlier(path, sid, str(row[5]), cwd, messages)
        if not already:
            moved = [{**m, "info": _moved(m.get("info") or {}, mapping)} for m in messages]
            _import(env, cwd, {"info": info, "messages": moved})
        row = _session(path, sid)
        if row is None:
            raise InvalidArgument(f"opencode import did not make session {sid} in {path}")
        return {"cli": CLI, "id": sid, "cwd": row[5], "transcript": path, **({"already": True} if already else {})}

    def write(self, history: list[Said], env: Mapping[str, str], cwd: str, model: str) -> dict[str, Any] | None:
        """A new session holding ``history``, imported as ``place`` does: user prompts, the
        model's steps (text, then its tool calls, as opencode records a step), each tool call
        with its recorded result. Every message names the model it ran on, and ``opencode run
        -s`` without ``-m`` goes on with that one (a model not configured here fails the run):
        ``model`` (``PROVIDER/MODEL``), else the one opencode's configuration under ``env``
        names; None when neither says one."""
        provider, _, model_id = (model or configured_model(env)).partition("/")
        if not provider or not model_id:
            return None
        carried = Built(cwd, provider, model_id).of(history)
        _import(env, cwd, carried)
        return {"cli": CLI, "id": carried["info"]["id"], "cwd": cwd, "transcript": database(env)}


def _earlier(path: str, sid: str, directory: str, cwd: str, messages: list[Any]) -> bool:
    """Whether session ``sid`` here holds every carried message (True) or an earlier part of
    them (False: the rest is to be imported); refused when it holds one they do not (a fork
    cannot cut a longer one) or works in another folder than ``cwd``."""
    held = {mid for mid, *_ in _messages(path, sid)[0]}
    carried = [(m.get("info") or {}).get("id") for m in messages]
    if set(carried[:len(held)]) != held:  # not the first of the carried ones, none missing between
        raise Differs(f"opencode session {sid} is already in {path}, with another history")
    if os.path.realpath(directory) != os.path.realpath(cwd):
        raise InvalidArgument(f"opencode session {sid} is already here, in {directory}, not in {cwd}")
    return len(held) == len(carried)


def _moved(info: Mapping[str, Any], mapping: Mapping[str, str]) -> dict[str, Any]:
    """A message's info with its recorded folders (``path.cwd``, ``path.root``) remapped."""
    where = info.get("path")
    if not isinstance(where, dict):
        return dict(info)
    return {**info, "path": {k: remap(v, mapping) if isinstance(v, str) else v for k, v in where.items()}}


def configured_model(env: Mapping[str, str]) -> str:
    """The ``model`` of opencode's configuration under ``env``: ``$OPENCODE_CONFIG_CONTENT``,
    else the user's ``opencode.json`` (``$XDG_CONFIG_HOME/opencode``, ``~/.config/opencode``);
    "" when neither names one (a project's own config is not looked at)."""
    found = _loads(env.get("OPENCODE_CONFIG_CONTENT") or "{}").get("model")
    if not found:
        folder = os.path.join(env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME", "~"), ".config"), "opencode")
        for name in ("opencode.json", "config.json"):
            try:
                with open(os.path.expanduser(os.path.join(folder, name))) as config:
                    found = _loads(config.read()).get("model")
            except OSError:
                continue
            if found:
                break
    return found if isinstance(found, str) else ""


def _import(env: Mapping[str, str], cwd: str, carried: Mapping[str, Any]) -> None:
    """Run ``opencode import`` on ``carried`` in ``cwd`` (opencode takes its folder from
    ``$PWD``); its failure is said in one line."""
    exe = agents.locate(CLI, dict(env))
    fd, name = tempfile.mkstemp(prefix="procession-opencode-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(carried, out)
        try:
            done = subprocess.run([exe, "import", name], cwd=cwd, env={**env, "PWD": cwd}, capture_output=True,
                                  text=True, timeout=IMPORT_S, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise InvalidArgument(f"opencode import failed: {error}") from None
    finally:
        os.unlink(name)
    if done.returncode != 0 or "Imported session" not in done.stdout:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise InvalidArgument(f"opencode import failed: {said[-1] if said else f'exit {done.returncode}'}")


BASE62 = string.digits + string.ascii_uppercase + string.ascii_lowercase


class Ids:
    """opencode's ids: a prefix, 12 hex digits of (milliseconds * 4096 + a counter) modulo 2^48
    (bit-inverted for sessions, so the newest sorts first), and 14 random base-62 characters."""

    def __init__(self) -> None:
        self.last_ms, self.counter = 0, 0

    def make(self, prefix: str, ms: int, descending: bool = False) -> str:
        if ms != self.last_ms:
            self.last_ms, self.counter = ms, 0
        self.counter += 1
        value = (ms * 0x1000 + self.counter) % (1 << 48)
        if descending:
            value = ~value & ((1 << 48) - 1)
        return f"{prefix}_{value:012x}{''.join(secrets.choice(BASE62) for _ in range(14))}"


class Built:
    """A Procession history as an opencode export (see ``Opencode.write``)."""

    def __init__(self, cwd: str, provider: str, model: str) -> None:
        self.cwd, self.provider, self.model = cwd, provider, model
        self.ids = Ids()
        self.messages: list[dict[str, Any]] = []
        self.user = ""
        self.step: dict[str, Any] | None = None

    def of(self, history: list[Said]) -> dict[str, Any]:
        now = int(time.time() * 1000)
        times = self._times(history, now)
        sid = self.ids.make("ses", times[0] if times else now, descending=True)
        self.sid = sid
        for said, ms in zip(history, times, strict=True):
            if said.role == "user":
                self._user(said.content, ms)
            elif said.role == "tool" and isinstance(tool := (said.meta or {}).get("tool"), dict):
                self._tool(tool, ms)
            else:
                self._text(said.content, ms)
        first = next((s.content for s in history if s.role == "user"), "")
        info = {"id": sid, "slug": f"procession-{sid[-6:].lower()}", "projectID": "global", "directory": self.cwd,
                "title": summary(first) or "From Procession", "version": "procession",
                "model": {"id": self.model, "providerID": self.provider},
                "time": {"created": times[0] if times else now, "updated": times[-1] if times else now}}
        return {"info": info, "messages": self.messages}

    @staticmethod
    def _times(history: list[Said], now: int) -> list[int]:
        """Each message's milliseconds: its own time when known, never going back, all before
        now (so the CLI's next message sorts after them)."""
        out: list[int] = []
        start = now - 2 * len(history) - 1
        for said in history:
            ms = int(said.ts * 1000) if said.ts else (out[-1] + 1 if out else start)
            out.append(min(max(ms, out[-1] + 1 if out else ms), now - 1))
        return out

    def _user(self, text: str, ms: int) -> None:
        self.step = None
        self.user = self.ids.make("msg", ms)
        self.messages.append({
            "info": {"id": self.user, "sessionID": self.sid, "role": "user", "time": {"created": ms}, "agent": "build",
                     "model": {"providerID": self.provider, "modelID": self.model}},
            "parts": [self._part(self.user, {"type": "text", "text": text}, ms)]})

    def _text(self, text: str, ms: int) -> None:
        step = self._step(ms, after_tools=False)
        step["parts"].append(self._part(step["info"]["id"], {"type": "text", "text": text,
                                                             "time": {"start": ms, "end": ms}}, ms))

    def _tool(self, tool: Mapping[str, Any], ms: int) -> None:
        step = self._step(ms, after_tools=True)
        value = tool.get("input")
        state: dict[str, Any] = {"input": value if isinstance(value, dict) else {"input": value},
                                 "title": summary(value), "metadata": {}, "time": {"start": ms, "end": ms}}
        if tool.get("output") is None:
            state |= {"status": "error", "error": "(no result: the run stopped first)"}
        elif tool.get("is_error"):
            state |= {"status": "error", "error": str(tool["output"]) or "(failed)"}
        else:
            state |= {"status": "completed", "output": str(tool["output"])}
        step["info"]["finish"] = "tool-calls"
        step["parts"].append(self._part(step["info"]["id"], {"type": "tool", "tool": str(tool.get("name") or "tool"),
                                                             "callID": str(tool.get("id") or ""), "state": state}, ms))

    def _step(self, ms: int, after_tools: bool) -> dict[str, Any]:
        """The assistant message this text or tool call belongs to: a new one after tool calls
        (the model spoke again once it had their results) or after a user prompt."""
        step = self.step
        if step is not None and (after_tools or step["info"]["finish"] != "tool-calls"):
            step["info"]["time"]["completed"] = ms
            return step
        if not self.user:
            self._user("(the conversation so far)", ms)
        mid = self.ids.make("msg", ms)
        self.step = step = {
            "info": {"id": mid, "sessionID": self.sid, "role": "assistant", "parentID": self.user, "mode": "build",
                     "agent": "build", "path": {"cwd": self.cwd, "root": self.cwd}, "cost": 0,
                     "tokens": {"input": 0, "output": 0, "reasoning": 0, "cache": {"read": 0, "write": 0}},
                     "modelID": self.model, "providerID": self.provider, "time": {"created": ms, "completed": ms},
                     "finish": "stop"},
            "parts": []}
        self.messages.append(step)
        return step

    def _part(self, message: str, data: dict[str, Any], ms: int) -> dict[str, Any]:
        return {**data, "id": self.ids.make("prt", ms), "sessionID": self.sid, "messageID": message}


FORMAT = Opencode()
