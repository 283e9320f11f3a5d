"""Calls on a session's lineage: fork (copy-on-write) and three-way merge."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from ..model import agents, hosts, limits, runner_spec, states
from ..model.calls import Call
from ..model.errors import InvalidArgument, MergeConflict, ProcessionError
from ..model.outcomes import Forked, Merged, Note
from ..model.records import FileMerge, Fold, MergePlan, _Missing
from ..model.states import Reason, State
from ..model.text import plural
from ..store import Row, Store, Tx, bindings, messages, rows, runlog, sessions
from . import history, worktrees
from .base import Calls
from .merge import MISSING, Ancestor, Link, Resolution, common_ancestor, three_way
from .syscall import Act, syscall, transition

_NUMBERED = re.compile(r"^(.*) #(\d+)$")


class LineageCalls(Calls):
    async def fork(self, sid: int, name: str | None = None, *, at: int | None = None, worktree: bool = False,
                   carry: bool = False) -> Forked:
        """A new session sharing ``sid``'s history up to ``at`` (default: all of it).

        No message is copied: the child reads its parent's rows up to the fork point. Memory
        and bindings are copied, folds inside the shared range are kept, triggers are copied
        disarmed. Works on any session, an ended one included. Without a ``name`` the child
        is called after its parent with the next free number (``review #2``, ``review #3``).

        With ``worktree`` the child also gets a folder of its own (``worktrees``): a git
        worktree on a new branch at the parent's commit, or a copy outside git; its bindings
        and watches under the parent's folder point there. Uncommitted changes in the
        parent's repository refuse the fork, unless ``carry`` takes them along. The folder is
        made before the call's transaction and removed again if the call is refused.
        """
        if not worktree:
            if carry:
                raise InvalidArgument("carrying uncommitted changes applies to a fork with a worktree only")
            return await self._fork(sid, name, at=at)
        async with self.store.snapshot() as tx:
            row = await rows.session(tx, sid)
            hosts.refuse_elsewhere(row["host"], f"session {sid}'s folder")
            folder = await rows.workdir(tx, sid)
            name = limits.name(name if name is not None else await _next_name(tx, row), "session name")
        made = await asyncio.to_thread(worktrees.make, folder, name, carry, str(self.store.path))
        try:
            return await self._fork(sid, name, at=at, made=made)
        except BaseException:
            await asyncio.shield(asyncio.to_thread(worktrees.undo, made))
            raise

    @syscall(Call.FORK, other="result")
    async def _fork(self, act: Act, sid: int, name: str | None = None, *, at: int | None = None,
                    made: worktrees.Made | None = None) -> Forked:
        row = act.row
        named, in_force, triggers, base = await act.tx.together(
            _next_name(act.tx, row) if name is None else _given(name), history.folds(act.tx, sid),
            rows.triggers(act.tx, sid), basis(act.tx, row, at, None))
        child = await branch(act.tx, row, named, None, in_force, act.now, base)
        if row["agent_ref"]:
            forked = await rows.session(act.tx, child)
            act.note(f"its first run forks the agent's own {json.loads(row['agent_ref'])['cli']} session"
                     f"{' at message ' + str(forked['agent_seen']) if json.loads(forked['agent_ref'] or '{}').get('at') else ''};"
                     " the parent's is not touched" if forked["agent_ref"] else
                     "the agent's session cannot be cut that early: the fork's first run starts one, given the history so far")
        copied = len(triggers)  # the parent's, each copied disarmed
        if made is not None:
            await _settle(act, child, made)
        if copied:
            act.note(f"{plural(copied, 'trigger')} copied disarmed: approving the fork arms them",
                     Call.APPROVE, child)
        return Forked(child, sid, row["length"] if at is None else at, worktree=made.folder if made else None,
                      branch=made.branch if made else None)

    async def merge(self, source: int, target: int, resolution: Resolution = Resolution()) -> Merged:
        """Three-way merge of ``source`` into ``target``; the source ends ``terminated(merged)``.

        Refused with ``MergeConflict`` (nothing applied) while a key changed differently on
        both sides is not settled by ``resolution``. A source forked with a worktree also has
        its branch merged into the target's (git's own merge), or its copy's files brought
        into the target's folder; file conflicts are listed with the memory ones, and nothing
        is applied — memory, messages or files — until all are settled. The files are merged
        just before the call's transaction and taken back if it is refused; the fork's folder
        is removed after it commits.
        """
        found, files, gone = await self._plan(source, target, resolution)
        if not found.clean:
            raise MergeConflict(source, target, found.conflicts, found.files.conflicts if found.files else None)
        applied = None
        if files is not None:
            applied = await asyncio.to_thread(worktrees.apply, files, await self._merge_message(source, target))
        elif gone:
            outcome = await self._merge(source, target, resolution)
            async with self.store.tx() as tx:
                await rows.worktree_removed(tx, source)
            return dataclasses.replace(outcome, notes=outcome.notes + (Note(
                f"session {source}'s own folder and branch are gone: its memory and messages merged, no file"),))
        try:
            outcome = await self._merge(source, target, resolution, found.files, applied.commit if applied else None)
        except BaseException:
            if applied is not None:
                await asyncio.shield(asyncio.to_thread(worktrees.take_back, applied))
            raise
        if applied is None:
            return outcome
        await asyncio.to_thread(worktrees.finish, applied)
        return dataclasses.replace(outcome, notes=outcome.notes + tuple(
            Note(text) for text in await remove_folder(self.store, source)))

    async def merge_plan(self, source: int, target: int, resolution: Resolution = Resolution()) -> MergePlan:
        """What merging ``source`` into ``target`` would do, read and changing nothing (``merge
        --dry-run``): refused as the merge would be, conflicts listed rather than raised."""
        return (await self._plan(source, target, resolution))[0]

    async def _plan(self, source: int, target: int,
                    resolution: Resolution) -> tuple[MergePlan, worktrees.FilePlan | None, bool]:
        """The plan, what its files take, and whether the source's own folder is gone."""
        if source == target:
            raise InvalidArgument(f"cannot merge session {source} into itself")
        async with self.store.snapshot() as tx:
            src, dst = await rows.session(tx, source), await rows.session(tx, target)
            transition(src, Call.MERGE)
            transition(dst, Call.MERGE, states.SECOND)
            ancestor, changes, conflicts, resolved = await _memory_plan(tx, src, target, resolution)
            record = await rows.worktree(tx, source)
            folder = await rows.workdir(tx, target)
        files = None
        if record is not None:
            if src["host"] != dst["host"]:
                raise InvalidArgument(f"session {source}'s own folder is on host {src['host']} and session {target}'s"
                                      f" folder on host {dst['host']}: merging files needs both on one host (move one"
                                      " of them to the other's host first)")
            hosts.refuse_elsewhere(src["host"], f"session {source}'s own folder {record['path']}")
        gone = record is not None and await asyncio.to_thread(worktrees.gone, record)
        if record is not None and not gone:
            files = await asyncio.to_thread(worktrees.plan, record, source, target, folder, resolution)
        plan = MergePlan(source, target, ancestor.session, src["length"] - ancestor.seq,
                         {k: json.loads(v) for k, v in changes.items() if isinstance(v, str)},
                         tuple(k for k, v in changes.items() if v is MISSING), conflicts, resolved,
                         files.summary if files else None)
        return plan, files, gone

    async def _merge_message(self, source: int, target: int) -> str:
        async with self.store.snapshot() as tx:
            src, dst = await rows.session(tx, source), await rows.session(tx, target)
        return (f"procession: merge session {source} ({src['name']}) into session {target} ({dst['name']})\n\n"
                f"Session {source} of agent {src['agent']} was forked with this worktree; merged by `procession"
                f" merge {source} {target}`.")

    @syscall(Call.MERGE, session="target", other="source", check="source", second="target")
    async def _merge(self, act: Act, source: int, target: int, resolution: Resolution,
                     files: FileMerge | None = None, commit: str | None = None) -> Merged:
        tx, src, dst = act.tx, act.row, act.other
        assert dst is not None
        ancestor, changes, conflicts, resolved = await _memory_plan(tx, src, target, resolution)
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
        added = await rows.copy_resources(tx, source, target, outside=files.worktree if files else None)
        await rows.update_session(tx, source, state=State.TERMINATED.value, reason=Reason.MERGED.value,
                                  merged_into=target, resume_to=None, queued_at=None, causes=None)
        await rows.withdraw(tx, session=source)  # what it asked, from a run its engine left, ends with it
        await tx.touch(target)
        act.note(f"session {source} ends: merged into {target}")
        if ancestor.session is None:
            act.note(f"{source} and {target} share no history, so all of {source}'s messages joined"
                     " (merging a copy into its original repeats them)")
        if files is not None:
            into = f"branch {files.target_branch} in {files.folder}" if files.kind == "git" else files.folder
            what = f"its branch {files.branch}" if files.kind == "git" else "its copy's files"
            act.note(f"{what} merged into {into}: {plural(len(files.changes), 'file')} changed"
                     + (f" (commit {commit[:10]})" if commit else ""))
        return Merged(target, source, ancestor.session, n, tuple(changes), added,
                      {**resolved, **(files.resolved if files else {})},
                      files=tuple(f"{st} {p}" for st, p in files.changes) if files else (), commit=commit)


async def _given(name: str) -> str:
    return name


async def _next_name(tx: Tx, row: Row) -> str:
    """The parent's name with the next free number: forks of forks do not grow their names."""
    found = _NUMBERED.match(row["name"])
    return await sessions.fork_name(tx, row["agent_id"], found.group(1) if found else row["name"])


async def remove_folder(store: Store, sid: int, *, wait_s: float = 0.0) -> list[str]:
    """Remove session ``sid``'s own folder (``fork --worktree``; it holds nothing unsaved: the
    caller made sure) and record that it is gone. What goes wrong is a note, not an error: the
    call that asked for it is done. ``wait_s``: how long to let a step being killed go first."""
    async with store.snapshot() as tx:
        record = await rows.worktree(tx, sid)
    if record is None:
        return []
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        async with store.snapshot() as tx:
            if not await runlog.live(tx, sid):
                break
        await asyncio.sleep(0.05)
    try:
        notes = await asyncio.to_thread(worktrees.remove, record)
    except (ProcessionError, OSError) as exc:
        return [f"its folder {record['path']} could not be removed ({exc}); remove it by hand"]
    async with store.tx() as tx:
        await rows.worktree_removed(tx, sid)
    return notes


async def _memory_plan(tx: Tx, src: Row, target: int, resolution: Resolution) -> tuple[
        Ancestor, dict[str, str | _Missing], dict[str, tuple[Any, Any, Any]], dict[str, Any]]:
    """The memory side of a merge: where the histories part, what changes, what conflicts."""
    source = src["id"]
    if not src["armed"]:
        raise ProcessionError(
            f"session {source} is not approved (its runner waits for a person: a snapshot, an adopted transcript"
            " or an agent brought it): review it, approve it, then merge it")
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
    if ancestor.base_of is not None:
        ancestor = dataclasses.replace(ancestor, memory=await rows.fork_base(tx, ancestor.base_of))
    changes, conflicts, resolved = three_way(
        ancestor.memory, await rows.memory(tx, target), await rows.memory(tx, source), resolution
    )
    return ancestor, changes, conflicts, resolved


async def _settle(act: Act, child: int, made: worktrees.Made) -> None:
    """A fork's own folder recorded, and the fork moved into it: its folder, its bindings and
    watches under the parent's folder, its commit triggers on the parent's branch."""
    tx = act.tx
    await rows.insert_worktree(tx, child, made.kind, made.path, made.folder, made.source, made.repo, made.branch,
                               made.base)
    await rows.update_session(tx, child, cwd=made.folder)
    await rows.relocate(tx, child, made.source, made.folder)
    moved = 0
    for t in await rows.triggers(tx, child):
        spec = json.loads(t["spec"])
        if t["kind"] == "watch":
            paths = [_moved(p, made.source, made.folder) for p in spec["paths"]]
            changed = paths != spec["paths"]
            spec["paths"] = paths
        elif t["kind"] == "commit" and made.kind == "git" and spec["repo"] == made.source_top:
            changed = True
            spec["repo"] = made.path
            if spec["branch"] == made.source_branch:
                spec["branch"] = made.branch
        else:
            continue
        if changed:
            moved += 1
            await bindings.set_trigger_spec(tx, t["id"], spec)
    where = f"a git worktree on the new branch {made.branch}" if made.kind == "git" else "a copy of its folder"
    act.note(f"session {child} works in {made.folder}: {where}"
             + (f", with {plural(len(made.carried), 'uncommitted change')} carried over" if made.carried else ""))
    if made.databases:
        act.note(f"{plural(len(made.databases), 'SQLite database')} copied as SQLite committed {'it' if len(made.databases) == 1 else 'them'}"
                 f" (a consistent snapshot, without side files): {worktrees.named(made.databases)}")
    if made.left_out:
        act.note(f"left out of the copy: {worktrees.named(made.left_out)} (this workspace's own database and what"
                 " is not a regular file, a FIFO or a device, are never copied)")
    if moved:
        act.note(f"{plural(moved, 'trigger')} of the fork now watch{'es' if moved == 1 else ''} its own folder"
                 + (" and branch" if made.kind == "git" else ""))


def _moved(path: str, old: str, new: str) -> str:
    old = old.rstrip("/")
    if path == old or path.startswith(old + "/"):
        return new.rstrip("/") + path[len(old):]
    return path


async def _links(tx: Tx, sid: int) -> list[Link]:
    return [
        Link(r["id"], r["fork_seq"], r["length"], json.loads(r["base_memory"]) if r["base_memory"] else None,
             r["base_at"], r["memory_from"] is not None)
        for r in await rows.ancestry(tx, sid)
    ]


class Basis(NamedTuple):
    """What a child of a session at a fork point is made of that is read from the store
    (``basis``), apart from the rest a call reads, so that both are read together."""

    at: int
    history_tokens: int
    agent: dict[str, Any]
    memory_from: int | None
    memory_rev: int | None
    child: int  # the child's SID, taken beforehand: its row then costs no round trip of its own


async def basis(tx: Tx, row: Row, at: int | None, memory: dict[str, str] | None) -> Basis:
    """A child of ``row`` at history position ``at`` (default: its end): the tokens of its
    history, its side of the agent's own session, (``memory`` None) where it reads its memory
    copy-on-write, and its SID."""
    sid = row["id"]
    at = row["length"] if at is None else at
    if not 0 <= at <= row["length"]:
        raise InvalidArgument(f"session {sid} has {row['length']} messages: the fork point must be 0..{row['length']}")
    hist_tokens, agent, (memory_from, memory_rev), child = await tx.together(
        history.cum_tokens(tx, sid, at), agent_fork(tx, row, at),
        rows.memory_source(tx, row) if memory is None else _none(), rows.next_sid(tx))
    return Basis(at, hist_tokens, agent, memory_from, memory_rev, child)


async def branch(tx: Tx, row: Row, name: str, memory: dict[str, str] | None, in_force: Sequence[Fold],
                 memory_at: float, base: Basis) -> int:
    """A child of ``row`` at ``base``'s history position, starting from ``memory`` as it was
    at time ``memory_at`` (the merge base of this branch), or (``memory`` None) reading the
    parent's memory copy-on-write: no row is copied until a key changes on either side.
    Returns the child's SID."""
    sid, at, hist_tokens, agent = row["id"], base.at, base.history_tokens, base.agent
    memory_from, memory_rev = base.memory_from, base.memory_rev
    inherited = [f for f in in_force if f.hi <= at]
    child = await rows.insert_session(
        tx, row["system_tokens"], id=base.child, agent_id=row["agent_id"], name=limits.name(name, "session name"),
        goal=row["goal"], system=row["system"], priority=row["priority"], runner=row["runner"], window=row["window"],
        timeout=row["timeout"], cwd=row["cwd"], armed=row["armed"], parent_id=sid, fork_seq=at,
        base_memory=None if memory is None else json.dumps(memory), memory_from=memory_from, memory_rev=memory_rev,
        base_at=memory_at, length=at, history_tokens=hist_tokens,
        context_tokens=row["system_tokens"] + hist_tokens - sum(f.archived_tokens - f.summary_tokens for f in inherited),
        context_count=at - sum(f.archived_count - 1 for f in inherited),
        env=row["env"], pass_env=row["pass_env"], tokenizer=row["tokenizer"], token_scale=row["token_scale"],
        token_samples=row["token_samples"], confine=row["confine"], net=row["net"],
        permissions=row["permissions"], host=row["host"], **agent,
    )
    if memory is not None:
        await rows.put_memory(tx, child, memory)
    await rows.copy_folds(tx, child, inherited)
    await rows.copy_resources(tx, sid, child, counted=False)
    await rows.copy_triggers(tx, sid, child)
    return child


async def _none() -> tuple[None, None]:
    return None, None


#: How far back a fork point looks for the agent's own record of a message, per step.
_LOOK_BACK = 256


async def agent_fork(tx: Tx, row: Row, at: int) -> dict[str, Any]:
    """The child's side of the agent's own session, for a fork at ``at``.

    The child is given a reference marked ``fork``: its first run forks the agent's session
    with the CLI's own fork (the parent's is never touched), then it has its own. Messages
    the parent's agent had not seen by the fork point stay unseen for the child's. A fork
    before what the agent has seen must cut the agent's session at that message: Claude Code
    resumes at the record a message came from (``at`` in the reference); a cut before any
    such record gives the child no agent session (its first run starts one, given the
    history so far). Codex and opencode cannot be cut by their CLIs: refused in one line. Over
    ACP, an agent that takes no session up again (Gemini CLI) is forked anywhere: each of its
    runs is given the conversation, the fork's its own.
    """
    if not row["agent_ref"]:
        return {}
    ref = json.loads(row["agent_ref"])
    whole = {"agent_ref": json.dumps({**ref, "fork": True}), "agent_seen": min(row["agent_seen"], at),
             "agent_context": row["agent_context"], "agent_window": row["agent_window"]}
    holds = await agent_holds(tx, row, ref["cli"])
    spec = runner_spec.parse(row["runner"])
    if spec.kind == runner_spec.ACP:  # ACP's session/fork copies a whole session, where the agent offers it
        title = agents.title(spec.cli)
        if spec.cli in agents.CLIS and not agents.CLIS[spec.cli].acp_load:
            return whole  # its runs are each given the conversation (it takes no session up): nothing to cut
        if spec.cli in agents.CLIS and not agents.CLIS[spec.cli].acp_fork:
            raise InvalidArgument(f"session {row['id']}'s agent, {title}, cannot fork its session over ACP")
        if at < holds:
            raise InvalidArgument(f"session {row['id']}'s {title} session can be forked over ACP only whole: fork"
                                  f" at {holds} or later (its last message), or not --at")
    if at >= holds:
        return whole
    if ref["cli"] != "claude":
        raise InvalidArgument(f"session {row['id']}'s {ref['cli']} session cannot be forked before its message"
                              f" {holds}, the last its agent holds (its CLI cannot cut its own session there):"
                              f" fork at {holds} or later")
    found = await agent_cut(tx, row["id"], at)
    if found is None:
        return {}
    cut, seq = found
    return {"agent_ref": json.dumps({**ref, "fork": True, "at": cut}), "agent_seen": seq,
            "agent_window": row["agent_window"]}


async def agent_holds(tx: Tx, row: Row, cli: str) -> int:
    """The last message the agent's own session holds: what it was given (``agent_seen``), and
    what it said and did itself after (its replies and tool calls are in its session too)."""
    return max(int(row["agent_seen"]), await messages.last_said(tx, row["id"], cli) or 0)


async def agent_cut(tx: Tx, sid: int, at: int) -> tuple[str, int] | None:
    """Where Claude Code can resume the session's agent at message ``at`` or before: the uuid
    of the newest record a message up to ``at`` came from, and that message's seq."""
    hi = at
    while hi > 0:
        lo = max(hi - _LOOK_BACK, 0)
        for message in reversed(await history.read(tx, sid, lo, hi)):
            cut = (message.meta or {}).get("agent_uuid")
            if cut:
                return str(cut), message.seq
        hi = lo
    return None

