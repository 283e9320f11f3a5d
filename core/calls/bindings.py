"""Calls on what a session is bound to and what wakes it: resources, triggers, approval."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
from collections.abc import Sequence
from typing import Any

from ..model import limits, mcp_binding, trigger_spec
from ..model.calls import Call
from ..model.errors import InvalidArgument, NotFound, ProcessionError
from ..model.outcomes import Approved, Bound, TriggerAdded, TriggerRemoved, Unbound
from ..model.records import Resource, TriggerInfo
from ..store import Tx, bindings, rows
from . import commits
from .base import Calls
from .syscall import Act, syscall
from .watched import is_glob, scan


class BindingCalls(Calls):
    @syscall(Call.APPROVE)
    async def approve(self, act: Act, sid: int) -> Approved:
        """Arm a session's runner and all its triggers, after the user has looked at them: a
        session loaded from a file, or a fork (whose copied triggers arrive disarmed)."""
        disarmed = [t for t in await rows.triggers(act.tx, sid) if not t["armed"]]
        if act.row["armed"] and not disarmed:
            raise ProcessionError(f"session {sid} is already approved and all its triggers are armed")
        await rows.arm_triggers(act.tx, sid)
        await rows.update_session(act.tx, sid, armed=1)
        return Approved(sid, act.row["runner"], tuple(_trigger_info(t) for t in disarmed))

    @syscall(Call.BIND)
    async def bind(self, act: Act, sid: int, kind: str, uri: str, *, mode: str = "rw") -> Bound:
        """Bind a resource (file, folder, sqlite, mcp, tool, url); paths are stored absolute."""
        kind = limits.resource_kind(kind)
        if mode not in limits.RESOURCE_MODES:
            raise InvalidArgument("the mode must be ro or rw")
        if kind in limits.PATH_KINDS:  # resolved once, here: a link put in its place later is not followed
            uri = os.path.realpath(trigger_spec.absolute(uri, act.row["cwd"]))
        else:
            limits.name(uri, "resource", 4096)
        if kind == "mcp":
            _mcp_uri(uri)
        if any(r["kind"] == kind and r["uri"] == uri for r in await rows.resources(act.tx, sid)):
            raise InvalidArgument(f"session {sid} already has {kind} {uri} bound")
        rid = await rows.insert_resource(act.tx, sid, kind, uri, mode)
        await act.tx.touch(sid)
        if kind in limits.PATH_KINDS:
            _note_missing(act, [uri])
        return Bound(sid, Resource(rid, kind, uri, mode))

    @syscall(Call.UNBIND)
    async def unbind(self, act: Act, sid: int, resource: str) -> Unbound:
        """Unbind a resource given by its id or its URI."""
        wanted = {resource} if resource.isdigit() else {resource, trigger_spec.absolute(resource, act.row["cwd"])}
        for r in await rows.resources(act.tx, sid):
            if str(r["id"]) in wanted or r["uri"] in wanted:
                await rows.delete_resource(act.tx, r["id"])
                await act.tx.touch(sid)
                return Unbound(sid, Resource(*r))
        raise NotFound(f"session {sid} has no resource {resource}")

    async def trigger_add(self, sid: int, kind: str, args: Sequence[str] = (), *, debounce_ms: int | None = None,
                          branch: str | None = None, paths: Sequence[str] = ()) -> TriggerAdded:
        """Add a trigger (watch, cron, every, inbox, after, commit). A watch's files are
        fingerprinted, and a commit trigger's repository looked up with git (its branch tips
        are what it starts from), before the call's transaction, so that neither holds the
        workspace locked. A commit trigger's repository defaults to the session's folder."""
        async with self.store.snapshot() as tx:
            cwd = await rows.workdir(tx, sid) if kind == "commit" else (await rows.session(tx, sid))["cwd"]
        spec = trigger_spec.parse(kind, list(args), cwd=cwd, debounce_ms=debounce_ms, branch=branch, paths=paths)
        state: dict[str, Any] | None = None
        notes: list[str] = []
        if kind == "watch":
            state = await asyncio.to_thread(scan, spec["paths"])
        elif kind == "commit":
            spec, state, notes = await asyncio.to_thread(commits.follow, spec)
        return await self._trigger_add(sid, kind, spec, state, notes)

    @syscall(Call.TRIGGER)
    async def _trigger_add(self, act: Act, sid: int, kind: str, spec: dict[str, Any],
                           state: dict[str, Any] | None, notes: Sequence[str] = ()) -> TriggerAdded:
        for t in await rows.triggers(act.tx, sid, kind):
            if json.loads(t["spec"]) == spec:
                raise InvalidArgument(f"session {sid} already has this trigger (trigger {t['id']})")
        if kind == "after":
            if spec["session"] == sid:
                raise InvalidArgument("a session cannot wake after itself")
            await rows.session(act.tx, spec["session"])
            loop = await _after_path(act.tx, sid, spec["session"])
            if loop:
                raise InvalidArgument(
                    f"session {sid} would wake after {spec['session']}, but {spec['session']} already wakes when"
                    f" {sid} runs ({' -> '.join(map(str, loop))}): they would wake each other forever")
        tid = await rows.insert_trigger(act.tx, sid, kind, spec, bool(act.row["armed"]), state)
        await act.tx.touch(sid)
        if kind == "watch":
            _note_missing(act, [p for p in spec["paths"] if not is_glob(p)])
        for text in notes:
            act.note(text)
        return TriggerAdded(sid, TriggerInfo(tid, sid, kind, json.dumps(spec), bool(act.row["armed"]), None, 0, False,
                                             json.dumps(state) if kind == "commit" else None))

    @syscall(Call.TRIGGER)
    async def trigger_remove(self, act: Act, sid: int, trigger: int) -> TriggerRemoved:
        for t in await rows.triggers(act.tx, sid):
            if t["id"] == trigger:
                await rows.delete_trigger(act.tx, trigger)
                await act.tx.touch(sid)
                return TriggerRemoved(sid, _trigger_info(t))
        raise NotFound(f"session {sid} has no trigger {trigger}")


def _note_missing(act: Act, paths: Sequence[str]) -> None:
    """Accepted, but worth a word: a path with nothing there yet (a typo, or a file to come)."""
    for path in paths:
        if not os.path.exists(path):
            act.note(f"{path} does not exist (yet)")


def _trigger_info(t: Any) -> TriggerInfo:
    return TriggerInfo(t["id"], t["session_id"], t["kind"], t["spec"], bool(t["armed"]), t["last_fired"], t["fired"],
                       t["pending"] is not None, t["state"] if t["kind"] == "commit" else None)


async def _after_path(tx: Tx, start: int, goal: int) -> list[int]:
    """A chain of ``after`` triggers by which ``goal`` already wakes when ``start`` runs
    (``start``, ..., ``goal``), or [] when there is none. Reads one level of the chain per
    query: the cost grows with the chain, not with the number of triggers."""
    came_from: dict[int, int | None] = {start: None}
    frontier = [start]
    while frontier:
        found = await bindings.woken_after(tx, frontier)
        frontier = []
        for row in found:
            if row["session_id"] not in came_from:
                came_from[row["session_id"]] = row["waker"]
                frontier.append(row["session_id"])
        if goal in came_from:
            path: list[int] = []
            node: int | None = goal
            while node is not None:
                path.append(node)
                node = came_from[node]
            return path[::-1]
    return []


def _mcp_uri(uri: str) -> None:
    """An MCP server is a command run over stdio, or a streamable-HTTP endpoint."""
    if uri.startswith(("http://", "https://")):
        return
    if mcp_binding.is_procession("mcp", uri):  # Procession's own server, scoped to the session
        mcp_binding.allowed(uri)
        return
    try:
        words = shlex.split(uri[len("stdio:"):]) if uri.startswith("stdio:") else []
    except ValueError as exc:
        raise InvalidArgument(f"the MCP command {uri!r} does not parse: {exc}") from None
    if not words:
        raise InvalidArgument("an MCP server is bound as 'stdio:COMMAND ARGS...' or an http(s):// URL")
