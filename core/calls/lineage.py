"""Calls on a session's lineage: fork (copy-on-write) and three-way merge."""

from __future__ import annotations

import dataclasses
import json
import re
import sqlite3
from collections.abc import Sequence
from typing import Any

from ..model import limits
from ..model.calls import Call
from ..model.errors import InvalidArgument, MergeConflict, ProcessionError
from ..model.outcomes import Forked, Merged
from ..model.records import Fold
from ..model.states import Reason, State
from ..model.text import plural
from ..store import rows
from ..store.sqlite import Tx
from . import history
from .base import Calls
from .merge import MISSING, Link, Resolution, common_ancestor, three_way
from .syscall import Act, syscall

_NUMBERED = re.compile(r"^(.*) #(\d+)$")


class LineageCalls(Calls):
    @syscall(Call.FORK, other="result")
    async def fork(self, act: Act, sid: int, name: str | None = None, *, at: int | None = None) -> Forked:
        """A new session sharing ``sid``'s history up to ``at`` (default: all of it).

        No message is copied: the child reads its parent's rows up to the fork point. Memory
        and bindings are copied, folds inside the shared range are kept, triggers are copied
        disarmed. Works on any session, an ended one included. Without a ``name`` the child
        is called after its parent with the next free number (``review #2``, ``review #3``).
        """
        row = act.row
        name = name if name is not None else await _next_name(act.tx, row)
        child = await branch(act.tx, row, name, at, await rows.memory(act.tx, sid), await history.folds(act.tx, sid),
                             act.now)
        if row["agent_ref"]:
            forked = await rows.session(act.tx, child)
            act.note(f"its first run forks the agent's own {json.loads(row['agent_ref'])['cli']} session"
                     f"{' at message ' + str(forked['agent_seen']) if json.loads(forked['agent_ref'] or '{}').get('at') else ''};"
                     " the parent's is not touched" if forked["agent_ref"] else
                     "the agent's session cannot be cut that early: the fork's first run starts one, given the history so far")
        copied = len(await rows.triggers(act.tx, sid))
        if copied:
            act.note(f"{plural(copied, 'trigger')} copied disarmed: approving the fork arms them",
                     Call.APPROVE, child)
        return Forked(child, sid, row["length"] if at is None else at)

    async def merge(self, source: int, target: int, resolution: Resolution = Resolution()) -> Merged:
        """Three-way merge of ``source`` into ``target``; the source ends ``terminated(merged)``.

        Refused with ``MergeConflict`` (nothing applied) while a key changed differently on
        both sides is not settled by ``resolution``.
        """
        if source == target:
            raise InvalidArgument(f"cannot merge session {source} into itself")
        return await self._merge(source, target, resolution)

    @syscall(Call.MERGE, session="target", other="source", check="source", second="target")
    async def _merge(self, act: Act, source: int, target: int, resolution: Resolution) -> Merged:
        tx, src, dst = act.tx, act.row, act.other
        assert dst is not None
        if not src["armed"]:
            raise ProcessionError(
                f"session {source} came from a snapshot file and is not approved: review it, approve it,"
                " then merge it")
        values = {}
        for key, text in (resolution.values or {}).items():
            limits.name(key, "memory key", limits.KEY_MAX)
            what = f"the value given for {key!r}"
            try:
                values[key] = limits.json_value(limits.json_loads(text, what), what)
            except limits.NotJson:
                raise InvalidArgument(f"{what} is not JSON") from None
        resolution = dataclasses.replace(resolution, values=values)
        ancestor = common_ancestor(await _links(tx, source), await _links(tx, target))
        changes, conflicts, resolved = three_way(
            ancestor.memory, await rows.memory(tx, target), await rows.memory(tx, source), resolution
        )
        if conflicts:
            raise MergeConflict(source, target, conflicts)
        joining = await history.read(tx, source, ancestor.seq)
        n = await rows.append(
            tx, dst,
            [(m.role, m.content, m.author, m.pinned, {**(m.meta or {}), "merged_from": source, "from_seq": m.seq})
             for m in joining],
            self.store.count_tokens,
        )
        await rows.delete_memory(tx, target, [k for k, v in changes.items() if v is MISSING])
        await rows.put_memory(tx, target, {k: v for k, v in changes.items() if isinstance(v, str)})
        added = await rows.copy_resources(tx, source, target)
        await rows.update_session(tx, source, state=State.TERMINATED.value, reason=Reason.MERGED.value,
                                  merged_into=target, resume_to=None, queued_at=None, causes=None)
        await tx.touch(target)
        act.note(f"session {source} ends: merged into {target}")
        if ancestor.session is None:
            act.note(f"{source} and {target} share no history, so all of {source}'s messages joined"
                     " (merging a copy into its original repeats them)")
        return Merged(target, source, ancestor.session, n, tuple(changes), added, resolved)


async def _next_name(tx: Tx, row: sqlite3.Row) -> str:
    """The parent's name with the next free number: forks of forks do not grow their names."""
    found = _NUMBERED.match(row["name"])
    base = found.group(1) if found else row["name"]
    taken = {r["name"] for r in await tx.all("SELECT name FROM sessions WHERE agent_id = ? AND name LIKE ?",
                                             (row["agent_id"], f"{base} #%"))}
    n = 2
    while f"{base} #{n}" in taken:
        n += 1
    return f"{base} #{n}"


async def _links(tx: Tx, sid: int) -> list[Link]:
    return [
        Link(r["id"], r["fork_seq"], r["length"], json.loads(r["base_memory"]) if r["base_memory"] else None,
             r["base_at"])
        for r in await rows.ancestry(tx, sid)
    ]


async def branch(tx: Tx, row: sqlite3.Row, name: str, at: int | None, memory: dict[str, str],
                 in_force: Sequence[Fold], memory_at: float) -> int:
    """A child of ``row`` at history position ``at``, starting from ``memory`` as it was at
    time ``memory_at`` (the merge base of this branch). Returns the child's SID."""
    sid = row["id"]
    at = row["length"] if at is None else at
    if not 0 <= at <= row["length"]:
        raise InvalidArgument(f"session {sid} has {row['length']} messages: the fork point must be 0..{row['length']}")
    inherited = [f for f in in_force if f.hi <= at]
    hist_tokens = await history.cum_tokens(tx, sid, at)
    agent = await agent_fork(tx, row, at)
    child = await rows.insert_session(
        tx, row["system_tokens"], agent_id=row["agent_id"], name=limits.name(name, "session name"),
        goal=row["goal"], system=row["system"], priority=row["priority"], runner=row["runner"], window=row["window"],
        timeout=row["timeout"], cwd=row["cwd"], armed=row["armed"], parent_id=sid, fork_seq=at,
        base_memory=json.dumps(memory), base_at=memory_at, length=at, history_tokens=hist_tokens,
        context_tokens=row["system_tokens"] + hist_tokens - sum(f.archived_tokens - f.summary_tokens for f in inherited),
        context_count=at - sum(f.archived_count - 1 for f in inherited),
        env=row["env"], pass_env=row["pass_env"], **agent,
    )
    await rows.put_memory(tx, child, memory)
    await rows.copy_folds(tx, child, inherited)
    await rows.copy_resources(tx, sid, child)
    await rows.copy_triggers(tx, sid, child)
    return child


#: How far back a fork point looks for the agent's own record of a message, per step.
_LOOK_BACK = 256


async def agent_fork(tx: Tx, row: sqlite3.Row, at: int) -> dict[str, Any]:
    """The child's side of the agent's own session, for a fork at ``at``.

    The child is given a reference marked ``fork``: its first run forks the agent's session
    with the CLI's own fork (the parent's is never touched), then it has its own. Messages
    the parent's agent had not seen by the fork point stay unseen for the child's. A fork
    before what the agent has seen must cut the agent's session at that message: Claude Code
    resumes at the record a message came from (``at`` in the reference); a cut before any
    such record gives the child no agent session (its first run starts one, given the
    history so far). Codex and opencode cannot be cut by their CLIs: refused in one line.
    """
    if not row["agent_ref"]:
        return {}
    ref = json.loads(row["agent_ref"])
    whole = {"agent_ref": json.dumps({**ref, "fork": True}), "agent_seen": min(row["agent_seen"], at),
             "agent_context": row["agent_context"], "agent_window": row["agent_window"]}
    if at >= row["agent_seen"]:
        return whole
    if ref["cli"] != "claude":
        raise InvalidArgument(f"session {row['id']}'s {ref['cli']} session cannot be forked before its message"
                              f" {row['agent_seen']}, the last its agent has seen: fork at {row['agent_seen']} or later")
    hi = at
    while hi > 0:
        lo = max(hi - _LOOK_BACK, 0)
        for message in reversed(await history.read(tx, row["id"], lo, hi)):
            cut = (message.meta or {}).get("agent_uuid")
            if cut:
                return {"agent_ref": json.dumps({**ref, "fork": True, "at": cut}), "agent_seen": message.seq,
                        "agent_window": row["agent_window"]}
        hi = lo
    return {}

