"""The MCP server's tools: each one a CLI command (or one operation of it), over MCP.

A tool takes the arguments its command declares in the registry (``procession.cli.registry``),
less those that only make sense in a shell (files, standard input, the foreground engine):
its input schema and its description are generated from those declarations, so the CLI and
the tools cannot drift. Its reply is what the command prints with ``--json``; a refusal is
the one line the CLI prints after ``procession: error:``. Every tool goes through the
server's ``Scope`` first. Nothing here knows the MCP SDK: ``server`` puts it on the wire.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from procession.calls import Workspace
from procession.model import environ
from procession.model.calls import INFO, Call
from procession.model.errors import InvalidArgument, MergeConflict, NoneDone, ProcessionError
from procession.model.outcomes import Outcome
from procession.present import parse

from ..lineage import conflicts_json
from ..registry import COMMANDS, Arg
from .scope import Scope

Json = Any


class Refused(Exception):
    """A tool refused: ``lines`` are the refusals (one line each, as the CLI prints them: one
    per session refused, for a call on several), ``data`` what the CLI's ``--json`` says."""

    def __init__(self, lines: list[str], data: Json = None) -> None:
        super().__init__("\n".join(lines))
        self.lines, self.data = lines, data


@dataclass(slots=True)
class Served:
    """What a tool acts with: the workspace (as actor ``mcp``, as the scope's session) and the scope."""

    ws: Workspace
    scope: Scope


Handler = Callable[[Served, dict[str, Any]], Awaitable[Json]]


@dataclass(slots=True, frozen=True)
class Tool:
    name: str
    command: str  # the CLI command it is
    run: Handler
    op: str | None = None  # the command's operation it is
    skip: tuple[str, ...] = ()  # the command's arguments it does not take (shell only)
    require: tuple[str, ...] = ()  # arguments the command may go without and the tool may not
    optional: tuple[str, ...] = ()  # arguments the command needs and the tool fills in (from its scope)
    defaults: dict[str, Any] = field(default_factory=dict)  # this face's defaults (reads are bounded here)
    reads: bool = False  # changes nothing, journals nothing
    reach: str = "the sessions in reach"  # what it may act on, in words for its description
    schemas: dict[str, dict[str, Any]] = field(default_factory=dict)  # this face's own schema of an argument

    @property
    def args(self) -> list[Arg]:
        cmd = COMMANDS[self.command]
        found = [*cmd.args, *(cmd.ops[self.op] if self.op else [])]
        return [a for a in found if a.dest not in self.skip]

    @property
    def call(self) -> Call | None:
        return COMMANDS[self.command].call

    def description(self) -> str:
        text = COMMANDS[self.command].help
        if self.op:
            text += f" (this tool: {self.op})"
        return f"{text}. Acts on {self.reach}." + ("" if self.reads else " Journaled as actor mcp.")

    def input_schema(self) -> dict[str, Any]:
        properties, required = {}, []
        for a in self.args:
            schema = self.schemas.get(a.dest) or a.schema()
            if a.dest in self.defaults:
                schema["default"] = self.defaults[a.dest]
            properties[a.dest] = schema
            if (a.required or a.dest in self.require) and a.dest not in self.optional and "default" not in schema:
                required.append(a.dest)
        return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}

    def with_defaults(self, given: dict[str, Any]) -> dict[str, Any]:
        """The arguments given, over the defaults the schema shows (and ``None`` for the rest)."""
        out: dict[str, Any] = {}
        for a in self.args:
            default = self.defaults.get(a.dest, a.options.get("default"))
            out[a.dest] = False if default is None and a.options.get("action") == "store_true" else default
        return out | given

    @property
    def destructive(self) -> bool:
        return self.call is not None and INFO[self.call].confirm


# ---------------------------------------------------------------- the tools' bodies


def _data(outcome: Outcome) -> Json:
    return outcome.to_json()


async def ps(s: Served, a: dict[str, Any]) -> Json:
    reach = await s.scope.reach(s.ws)
    found = [row async for batch in s.ws.ps_json_batches(all=a["all"], agent=a["agent"], state=a["state"],
                                                          sort=a["sort"], reverse=a["reverse"]) for row in batch
             if reach is None or row["id"] in reach]
    return found[:a["limit"]] if a["limit"] else found


async def show(s: Served, a: dict[str, Any]) -> Json:
    await s.scope.check(s.ws, a["sid"])
    d = (await s.ws.show(a["sid"])).to_json()
    d["context"] = d["context"][-a["last"]:]
    return d


async def history(s: Served, a: dict[str, Any]) -> Json:
    await s.scope.check(s.ws, a["sid"])
    lo, hi = parse.history_window(max(0, a["after"]), a["limit"], parse.history_range(a["range"]) if a["range"] else None)
    return [{"seq": m.seq, "role": m.role, "content": m.content, "tokens": m.tokens, "author": m.author,
             "pinned": m.pinned, "created": m.created, "meta": m.meta}
            async for batch in s.ws.history_batches(a["sid"], lo, hi, tail=a["tail"]) for m in batch]


async def spawn(s: Served, a: dict[str, Any]) -> Json:
    """Into a folder the scope reaches; armed only when it brings nothing unapproved."""
    agent = a["agent"] or s.scope.agent
    if agent is None:
        raise InvalidArgument("spawn needs an agent")
    here = (await s.ws.info(s.scope.session)).cwd if s.scope.session is not None else os.getcwd()
    cwd = os.path.normpath(os.path.join(here, a["cwd"])) if a["cwd"] else here
    settings = dict(environ.setting(pair) for pair in a["env"] or [])
    passed = list(a["passed"] or [])
    armed = await s.scope.check_spawn(s.ws, agent, cwd, runner=a["runner"], env=settings, passed=passed,
                                      confine=a["confine"], net=a["net"], permissions=a["permissions"])
    return _data(await s.ws.spawn(a["name"], agent, system=a["system"], goal=a["goal"], priority=a["priority"],
                                  runner=a["runner"], window=a["window"], timeout=a["timeout"], cwd=cwd, env=settings,
                                  passed=passed, confine=a["confine"], net=a["net"], permissions=a["permissions"],
                                  restart=a["restart"], armed=armed))


async def send(s: Served, a: dict[str, Any]) -> Json:
    """From the scope's session (or the user, for a person's server): never from another."""
    await s.scope.check_send(s.ws, a["sid"], a["role"])
    return _data(await s.ws.send(a["sid"], a["text"], role=a["role"], sender=s.scope.session, pin=a["pin"]))


async def fork(s: Served, a: dict[str, Any]) -> Json:
    await s.scope.check(s.ws, a["sid"])
    return _data(await s.ws.fork(a["sid"], a["name"], at=a["at"], worktree=a["worktree"], carry=a["carry"]))


async def merge(s: Served, a: dict[str, Any]) -> Json:
    """Conflicts are refused with the data to settle them (``ours``/``theirs``/``set``/``pick``)."""
    for sid in (a["source"], a["target"]):
        await s.scope.check(s.ws, sid)
    resolution = parse.resolution(a["ours"] or [], a["theirs"] or [], a["set"] or [], a["pick"] or [], flags="")
    if a["dry_run"]:
        plan = await s.ws.merge_plan(a["source"], a["target"], resolution)
        return plan.to_json()
    try:
        return _data(await s.ws.merge(a["source"], a["target"], resolution))
    except MergeConflict as exc:
        raise Refused([str(exc)], conflicts_json(exc)) from None


async def memory_get(s: Served, a: dict[str, Any]) -> Json:
    await s.scope.check(s.ws, a["sid"])
    return await s.ws.memory_get(a["sid"], a["key"])


async def memory_set(s: Served, a: dict[str, Any]) -> Json:
    """The value as MCP gives it: any JSON value (a string is a string, not JSON to parse)."""
    await s.scope.check(s.ws, a["sid"])
    return _data(await s.ws.memory_set(a["sid"], a["key"], a["value"]))


async def memory_delete(s: Served, a: dict[str, Any]) -> Json:
    await s.scope.check(s.ws, a["sid"])
    return _data(await s.ws.memory_delete(a["sid"], a["key"]))


def each(call: Call) -> Handler:
    """A lifecycle call on every SID given, like the CLI's: all of them, or (one refused, or
    out of reach) none; the refusal says each session refused and that nothing was done."""

    async def run(s: Served, a: dict[str, Any]) -> Json:
        given = {k: v for k, v in a.items() if k != "sids"}  # cancel's clean
        refused = []
        for sid in a["sids"]:
            try:
                await s.scope.check(s.ws, sid)
            except ProcessionError as exc:
                refused.append(str(exc))
        try:
            if refused:
                raise NoneDone(refused)
            return [o.to_json() for o in await s.ws.each(call, a["sids"], **given)]
        except NoneDone as exc:
            raise Refused([*exc.refusals, exc.NOTHING], {"error": str(exc), "refused": exc.refusals}) from None

    return run


async def compress(s: Served, a: dict[str, Any]) -> Json:
    """Any of the ways the CLI has: built in, the model's (``model``, ``with_spec``), masked
    tool outputs, or a summary given."""
    await s.scope.check(s.ws, a["sid"])
    chosen = [n for n, v in (("model", a["model"] or a["with_spec"]), ("mask_tools", a["mask_tools"]),
                             ("summary", a["summary"] is not None)) if v]
    if len(chosen) > 1:
        raise InvalidArgument(f"choose one way to compress, not {' and '.join(chosen)}")
    if a["model"] or a["with_spec"]:
        from procession.engine.summaries import compress_by_model

        return _data(await compress_by_model(s.ws, a["sid"], a["keep_last"], spec=a["with_spec"]))
    return _data(await s.ws.compress(a["sid"], a["keep_last"], summary=a["summary"], mask_tools=a["mask_tools"]))


async def expand(s: Served, a: dict[str, Any]) -> Json:
    await s.scope.check(s.ws, a["sid"])
    return _data(await s.ws.expand(a["sid"]))


async def save(s: Served, a: dict[str, Any]) -> Json:
    await s.scope.check(s.ws, a["sid"])
    return _data(await s.ws.save(a["sid"], a["name"]))


async def trigger_add(s: Served, a: dict[str, Any]) -> Json:
    """Relative paths of a watch are the session's folder's, and what it watches must be in the
    session's folders (a commit trigger's repository too); an ``after`` must be in reach."""
    await s.scope.check(s.ws, a["sid"])
    words = a["args"] or []
    if a["kind"] == "after" and words and words[0].isdigit():
        await s.scope.check(s.ws, int(words[0]))
    if a["kind"] in ("watch", "commit"):
        folder = (await s.ws.info(a["sid"])).cwd
        await s.scope.check_watch(s.ws, a["sid"], [os.path.normpath(os.path.join(folder, w)) for w in words]
                                  or [folder])
    return _data(await s.ws.trigger_add(a["sid"], a["kind"], words, debounce_ms=a["debounce"], branch=a["branch"],
                                        paths=a["path"] or []))


async def trigger_remove(s: Served, a: dict[str, Any]) -> Json:
    await s.scope.check(s.ws, a["sid"])
    return _data(await s.ws.trigger_remove(a["sid"], a["tid"]))


async def wait(s: Served, a: dict[str, Any]) -> Json:
    await s.scope.check(s.ws, a["sid"])
    return (await s.ws.wait(a["sid"], a["timeout"], since=a["since"])).to_json()


async def pending(s: Served, a: dict[str, Any]) -> Json:
    reach = await s.scope.reach(s.ws)
    if a["request"] is not None:
        found = await s.ws.request(a["request"])
        await s.scope.check(s.ws, found.sid)
        return found.to_json()
    sids = [sid for sid in a["sids"] or [] if reach is None or sid in reach] if a["sids"] else None
    return [r.to_json() for r in await s.ws.pending(sids) if reach is None or r.sid in reach]


async def allow(s: Served, a: dict[str, Any]) -> Json:
    await s.scope.check_answer(s.ws, (await s.ws.request(a["request"])).sid, allow=True)
    return _data(await s.ws.allow(a["request"], always=a["always"]))


async def deny(s: Served, a: dict[str, Any]) -> Json:
    await s.scope.check_answer(s.ws, (await s.ws.request(a["request"])).sid, allow=False)
    return _data(await s.ws.deny(a["request"], why=a["why"]))


_LIFECYCLE = "the sessions in reach, each SID given: all of them, or (one refused) none"
_ANSWERS = ("the requests of the sessions in reach, never the server's own session's; a session's server allows only"
            " when its own session may do anything unasked (--permissions all)")

#: The tools, in the order they are listed.
TOOLS: dict[str, Tool] = {t.name: t for t in [
    Tool("ps", "ps", ps, reads=True, reach="the sessions in reach (it lists no other)"),
    Tool("show", "show", show, reads=True, defaults={"last": 20}),
    Tool("history", "history", history, reads=True, skip=("short",), defaults={"limit": 100}),
    Tool("spawn", "spawn", spawn, optional=("agent",), reach=("nothing yet: the new session is in reach (an agent's server spawns for its"
                                         " own agent; a session's for any; the runner must be armed on a session in"
                                         " reach already, or be builtin)")),
    Tool("send", "send", send, skip=("sender", "jsonl"), require=("text",),
         reach="any session, as the session this server is for"),
    Tool("fork", "fork", fork),
    Tool("merge", "merge", merge, reach="two sessions in reach; conflicts are refused with the data to settle them"),
    Tool("memory_get", "memory", memory_get, op="get", reads=True),
    Tool("memory_set", "memory", memory_set, op="set",
         schemas={"value": {"description": "the key's new value: any JSON value (a string is stored as a string)"}}),
    Tool("memory_delete", "memory", memory_delete, op="delete"),
    *(Tool(call.value, call.value, each(call), skip=("now",), reach=_LIFECYCLE)
      for call in (Call.ACTIVATE, Call.SUSPEND, Call.RESUME, Call.INTERRUPT, Call.CANCEL)),
    Tool("compress", "compress", compress),
    Tool("expand", "expand", expand),
    Tool("save", "save", save, skip=("output", "force"), require=("name",),
         reach="the sessions in reach (a checkpoint in the store; files are the CLI's)"),
    Tool("trigger_add", "trigger", trigger_add, op="add"),
    Tool("trigger_remove", "trigger", trigger_remove, op="rm"),
    Tool("wait", "wait", wait, reads=True),
    Tool("pending", "pending", pending, reads=True, reach="the requests of the sessions in reach"),
    Tool("allow", "allow", allow, reach=_ANSWERS),
    Tool("deny", "deny", deny, reach=_ANSWERS),
]}

#: What ``--allow`` also takes: a call's name for all of its tools.
GROUPS: dict[str, tuple[str, ...]] = {"memory": ("memory_get", "memory_set", "memory_delete"),
                                      "trigger": ("trigger_add", "trigger_remove")}


def allowed(names: str) -> frozenset[str]:
    """``--allow``'s comma-separated tool (or call) names."""
    out: set[str] = set()
    for name in (n.strip() for n in names.split(",")):
        if not name:
            continue
        if name not in TOOLS and name not in GROUPS:
            raise InvalidArgument(f"--allow: no tool {name!r}; tools are {', '.join(TOOLS)}")
        out.update(GROUPS.get(name, (name,)))
    return frozenset(out)
