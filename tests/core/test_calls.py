"""Every system call of ``Workspace``: what it does, its refusals, its journal row.

Each test works on a real workspace file (the ``ws`` fixture). A refused call must raise a
typed ``ProcessionError`` and leave every table exactly as it was (compared through a full
SQL dump of the file); an accepted one adds exactly one journal row.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from conftest import STORES, dump, sql
from procession import (
    ContextTooLarge,
    IllegalTransition,
    InvalidArgument,
    MergeConflict,
    NotFound,
    ProcessionError,
    Resolution,
    SessionNotFound,
    SnapshotError,
    State,
    Workspace,
)
from procession.calls.merge import MISSING, canonical
from procession.model import snapshot
from procession.model.snapshot import canonical_bytes

LONG = (
    "The quarterly report needs the revenue table checked against the ledger. "
    "Please compare each regional figure with the audited numbers and flag differences. "
)


pytestmark = STORES


def text(i: int) -> str:
    """A message long enough that a summary of a few of them is shorter than they are."""
    return f"Message {i}. {LONG}Item {i} concerns account {i * 7} and invoice {i * 13}."


# ---------------------------------------------------------------- helpers


async def journal_all(ws: Workspace) -> list[Any]:
    return await ws.journal(limit=1_000_000)


async def refused(ws: Workspace, exc_type: type[ProcessionError], coro: Any) -> ProcessionError:
    """Await ``coro``, expect ``exc_type``, and check that nothing at all changed."""
    before = dump(ws.path)
    with pytest.raises(exc_type) as info:
        await coro
    assert isinstance(info.value, ProcessionError)
    assert "\n" not in str(info.value) and str(info.value).strip()
    assert dump(ws.path) == before
    return info.value


async def accepted(ws: Workspace, call: str, coro: Any) -> tuple[Any, Any]:
    """Await ``coro``; exactly one journal row must be added, naming ``call`` and the actor."""
    before = await journal_all(ws)
    result = await coro
    after = await journal_all(ws)
    assert len(after) == len(before) + 1, f"{call}: {len(after) - len(before)} journal rows"
    entry = after[-1]
    assert entry.call == call
    assert entry.actor == ws.actor
    assert entry.outcome is not None
    return result, entry


async def check_tokens(ws: Workspace, sid: int) -> None:
    """context_tokens == system prompt + active context; messages == len(context)."""
    info = await ws.info(sid)
    detail = await ws.show(sid)
    ctx = await ws.context(sid)
    system_tokens = ws.store.count_tokens(detail.system) if detail.system else 0
    assert info.context_tokens == system_tokens + sum(i.tokens for i in ctx)
    assert info.messages == len(ctx)
    assert list(detail.context) == ctx
    hist = await ws.history(sid)
    assert info.length == len(hist)
    assert [m.seq for m in hist] == list(range(1, len(hist) + 1))
    for m in hist:
        assert m.tokens == ws.store.count_tokens(m.content)
    listed = {s.id: s for s in await ws.ps(all=True)}
    assert listed[sid].context_tokens == info.context_tokens
    assert listed[sid].messages == info.messages


async def check_all(ws: Workspace) -> None:
    for s in await ws.ps(all=True):
        await check_tokens(ws, s.id)


def count_rows(path: Path | str, table: str) -> int:
    return int(sql(path, f"SELECT count(*) FROM {table}")[0][0])


def force_state(path: Path | str, sid: int, state: str) -> None:
    """What the engine does when it starts a step (no public call leads to ``running``)."""
    sql(path, "UPDATE sessions SET state = ? WHERE id = ?", (state, sid))


def norm(items: Any) -> list[tuple[Any, ...]]:
    """Context items without fold ids (a fork or a load makes its own fold rows)."""
    return [(i.seq, i.role, i.content, i.tokens, i.author, i.pinned, i.fold is not None, i.folded, i.meta)
            for i in items]


def hist_key(msgs: Any) -> list[tuple[Any, ...]]:
    return [(m.seq, m.role, m.content, m.tokens, m.author, m.pinned, m.meta) for m in msgs]


async def session_with(ws: Workspace, n: int, name: str = "s", **kw: Any) -> int:
    sid = (await ws.spawn(name, "hr", **kw)).sid
    if n:
        await ws.send_many(sid, [{"role": "user" if i % 2 == 0 else "assistant", "content": text(i)}
                                 for i in range(1, n + 1)])
    return sid


# ---------------------------------------------------------------- journal: one row per accepted call


async def test_every_accepted_call_writes_one_journal_row(ws: Workspace, tmp_path: Path) -> None:
    made, e = await accepted(ws, "spawn", ws.spawn("alpha", "hr", system="You are careful.", goal="g"))
    sid = made.sid
    assert e.session == sid and e.outcome == {"sid": sid}
    assert e.args["name"] == "alpha" and e.args["agent"] == "hr" and e.args["system"] == "You are careful."

    sent, e = await accepted(ws, "send", ws.send(sid, "hello there"))
    assert sent.seq == 1 and e.session == sid and e.args["text"] == "hello there"
    other = (await ws.spawn("beta", "docs")).sid
    sent, e = await accepted(ws, "send", ws.send(sid, "from beta", sender=other, pin=True))
    assert e.session == sid and e.other == other and e.args["sender"] == other and e.args["pin"] is True
    sent, e = await accepted(ws, "send", ws.send_many(sid, [{"role": "user", "content": text(i)} for i in range(12)]))
    assert sent.count == 12 and e.session == sid

    _, e = await accepted(ws, "memory", ws.memory_set(sid, "plan", {"steps": [1, 2]}))
    assert e.session == sid and e.args == {"sid": sid, "key": "plan", "value": {"steps": [1, 2]}}
    assert e.outcome == {"sid": sid, "set": ["plan"], "deleted": []}
    _, e = await accepted(ws, "memory", ws.memory_set(sid, "tmp", 1))
    _, e = await accepted(ws, "memory", ws.memory_delete(sid, "tmp"))
    assert e.args["key"] == "tmp" and e.outcome["deleted"] == ["tmp"]

    compressed, e = await accepted(ws, "compress", ws.compress(sid, 2))
    fold = compressed.fold
    assert e.session == sid and e.args["keep_last"] == 2 and e.outcome["fold"]["archived_count"] == fold.archived_count
    _, e = await accepted(ws, "expand", ws.expand(sid))
    assert e.outcome["fold"]["id"] == fold.id

    forked, e = await accepted(ws, "fork", ws.fork(sid, "kid", at=5))
    child = forked.sid
    assert e.session == sid and e.other == child and e.args["at"] == 5 and e.outcome == {"sid": child, "parent": sid,
                                                                                            "at": 5, "worktree": None,
                                                                                            "branch": None}
    res, e = await accepted(ws, "merge", ws.merge(child, sid))
    assert e.session == sid and e.other == child and e.outcome["source"] == child and e.outcome["sid"] == sid

    saved, e = await accepted(ws, "save", ws.save(sid, "cp1"))
    assert e.session == sid and e.args["name"] == "cp1" and e.outcome["checkpoint"]["seq"] == saved.checkpoint.seq
    restored, e = await accepted(ws, "load", ws.load(sid, "cp1"))
    assert e.session == restored.sid and e.other == sid and e.args["checkpoint"] == "cp1"
    out, e = await accepted(ws, "save", ws.save(sid, file=str(tmp_path / "s.json")))
    assert e.session == sid and e.args["file"] == str(tmp_path / "s.json")
    loaded, e = await accepted(ws, "load", ws.load(str(tmp_path / "s.json")))
    assert e.session == loaded.sid
    _, e = await accepted(ws, "approve", ws.approve(loaded.sid))
    assert e.session == loaded.sid

    moved, e = await accepted(ws, "activate", ws.activate(sid))
    assert moved.state == State.READY and e.session == sid
    moved, e = await accepted(ws, "suspend", ws.suspend(sid))
    assert moved.state == State.SUSPENDED
    moved, e = await accepted(ws, "resume", ws.resume(sid))
    assert moved.state == State.READY
    moved, e = await accepted(ws, "interrupt", ws.interrupt(sid))
    assert moved.state == State.SLEEPING
    niced, e = await accepted(ws, "nice", ws.nice(sid, 5))
    assert niced.priority == 5 and e.args["priority"] == 5
    out, e = await accepted(ws, "migrate", ws.migrate(sid, "openai:gpt-x", window=200_000))
    assert out.window == 200_000 and e.args["runner"] == "openai:gpt-x"
    updated, e = await accepted(ws, "set", ws.set(sid, name="alpha two", timeout=30))
    assert updated.changed == ("name", "timeout") and e.args["name"] == "alpha two"
    bound, e = await accepted(ws, "bind", ws.bind(sid, "url", "https://example.org/api"))
    rid = bound.resource.id
    assert e.outcome["resource"]["id"] == rid
    _, e = await accepted(ws, "unbind", ws.unbind(sid, str(rid)))
    added, e = await accepted(ws, "trigger", ws.trigger_add(sid, "every", ["5m"]))
    assert e.args["kind"] == "every"
    _, e = await accepted(ws, "trigger", ws.trigger_remove(sid, added.trigger.id))
    moved, e = await accepted(ws, "cancel", ws.cancel(sid))
    assert moved.state == State.TERMINATED

    # the actor is whoever acts
    tui = ws.as_actor("tui")
    _, e = await accepted(tui, "memory", tui.memory_set(other, "k", True))
    assert e.actor == "tui"
    await check_all(ws)


async def test_reads_write_no_journal_row_and_change_nothing(ws: Workspace) -> None:
    sid = await session_with(ws, 4)
    await ws.memory_set(sid, "k", 1)
    await ws.save(sid, "cp")
    before, rows = dump(ws.path), len(await journal_all(ws))
    await ws.ps()
    await ws.ps(all=True, agent="hr", state="sleeping")
    await ws.info(sid)
    await ws.show(sid)
    await ws.history(sid)
    await ws.history(sid, 1, 3)
    await ws.context(sid)
    assert await ws.memory_get(sid, "k") == 1
    await ws.triggers(sid)
    await ws.journal(sid)
    await ws.runs(sid)
    with pytest.raises(NotFound, match=f"session {sid} has had no run yet"):  # the last run's log, of none
        await ws.run_log(sid)
    with pytest.raises(NotFound, match=f"session {sid} has no run 7"):
        await ws.run_log(sid, 7)
    assert dump(ws.path) == before
    assert len(await journal_all(ws)) == rows


async def test_journal_args_shorten_long_text(ws: Workspace) -> None:
    sid = (await ws.spawn("a", "hr")).sid
    body = "x" * 5000
    _, e = await accepted(ws, "send", ws.send(sid, body))
    assert len(e.args["text"]) < 300
    assert (await ws.history(sid))[0].content == body


async def test_journal_for_one_session_includes_calls_naming_it_as_other(ws: Workspace) -> None:
    a = (await ws.spawn("a", "hr")).sid
    b = (await ws.fork(a)).sid
    calls = [(e.call, e.session, e.other) for e in await ws.journal(b)]
    assert ("fork", a, b) in calls


# ---------------------------------------------------------------- refusals: typed error, store unchanged


async def test_refusals_are_typed_and_change_nothing(ws: Workspace, tmp_path: Path) -> None:
    sid = await session_with(ws, 3)
    other = (await ws.spawn("other", "hr")).sid
    await ws.memory_set(sid, "k", 1)
    await ws.save(sid, "cp")
    ended = (await ws.spawn("ended", "hr")).sid
    await ws.cancel(ended)
    frozen = (await ws.spawn("frozen", "hr")).sid
    await ws.suspend(frozen)
    rows = len(await journal_all(ws))

    # lifecycle
    await refused(ws, IllegalTransition, ws.suspend(ended))
    await refused(ws, IllegalTransition, ws.cancel(ended))
    await refused(ws, IllegalTransition, ws.activate(ended))
    await refused(ws, IllegalTransition, ws.resume(ended))
    await refused(ws, IllegalTransition, ws.activate(frozen))
    await refused(ws, IllegalTransition, ws.interrupt(frozen))
    await refused(ws, IllegalTransition, ws.resume(sid))
    await refused(ws, IllegalTransition, ws.interrupt(sid))
    await refused(ws, IllegalTransition, ws.send(ended, "hi"))
    await refused(ws, IllegalTransition, ws.memory_set(ended, "k", 1))
    await refused(ws, IllegalTransition, ws.compress(ended, 0))
    await refused(ws, IllegalTransition, ws.nice(ended, 3))
    await refused(ws, IllegalTransition, ws.bind(ended, "url", "https://x.org"))
    await refused(ws, IllegalTransition, ws.merge(ended, sid))
    await refused(ws, IllegalTransition, ws.merge(sid, ended))
    await refused(ws, IllegalTransition, ws.approve(ended))
    await refused(ws, IllegalTransition, ws.migrate(ended, "builtin:echo"))
    # unknown sessions
    for call in (ws.fork(999), ws.send(999, "x"), ws.suspend(999), ws.cancel(999), ws.compress(999),
                 ws.expand(999), ws.merge(999, sid), ws.merge(sid, 999), ws.save(999, "x"),
                 ws.load(999, "cp"), ws.save(999, file=str(tmp_path / "no.json")), ws.memory_set(999, "a", 1),
                 ws.send(sid, "x", sender=999), ws.nice(999, 1), ws.activate(999), ws.approve(999)):
        await refused(ws, SessionNotFound, call)
    for call in (ws.info(999), ws.show(999), ws.history(999), ws.context(999), ws.memory_get(999, "k"),
                 ws.journal(999)):
        with pytest.raises(SessionNotFound):
            await call
    assert not (tmp_path / "no.json").exists()
    # bad arguments
    await refused(ws, InvalidArgument, ws.merge(sid, sid))
    await refused(ws, InvalidArgument, ws.send(sid, "x", role="wizard"))
    await refused(ws, InvalidArgument, ws.send(sid, "x", sender=sid))
    await refused(ws, InvalidArgument, ws.memory_set(sid, "", 1))
    await refused(ws, InvalidArgument, ws.memory_set(sid, "bad\x00key", 1))
    await refused(ws, InvalidArgument, ws.memory_set(sid, "k", {1, 2}))
    await refused(ws, InvalidArgument, ws.memory_set(sid, "k", object()))
    await refused(ws, NotFound, ws.memory_delete(sid, "absent"))
    with pytest.raises(NotFound):
        await ws.memory_get(sid, "absent")
    await refused(ws, InvalidArgument, ws.compress(sid, -1))
    await refused(ws, ProcessionError, ws.expand(sid))  # nothing compressed
    await refused(ws, InvalidArgument, ws.fork(sid, at=-1))
    await refused(ws, InvalidArgument, ws.fork(sid, at=4))
    await refused(ws, InvalidArgument, ws.fork(sid, "bad\nname"))
    await refused(ws, InvalidArgument, ws.spawn("x", "hr", runner="nonsense"))
    await refused(ws, InvalidArgument, ws.spawn("x", "hr", runner="builtin:nope"))
    await refused(ws, InvalidArgument, ws.spawn("x", "hr", window=0))
    await refused(ws, InvalidArgument, ws.spawn("x", "hr", priority=101))
    await refused(ws, InvalidArgument, ws.spawn("x", "hr", cwd="relative/dir"))
    await refused(ws, InvalidArgument, ws.spawn("", "hr"))
    await refused(ws, InvalidArgument, ws.spawn("x", ""))
    await refused(ws, InvalidArgument, ws.spawn("x", "hr", timeout=-1))
    await refused(ws, InvalidArgument, ws.nice(sid, 500))
    await refused(ws, InvalidArgument, ws.nice(sid, -101))
    await refused(ws, InvalidArgument, ws.save(sid, "cp"))  # the name is taken
    await refused(ws, InvalidArgument, ws.save(sid, ""))
    await refused(ws, NotFound, ws.load(sid, "nope"))
    await refused(ws, ProcessionError, ws.approve(sid))  # already approved
    await refused(ws, InvalidArgument, ws.bind(sid, "planet", "mars"))
    await refused(ws, InvalidArgument, ws.bind(sid, "url", "https://x.org", mode="wx"))
    await ws.bind(sid, "url", "https://x.org")
    rows += 1
    await refused(ws, InvalidArgument, ws.bind(sid, "url", "https://x.org"))
    await refused(ws, NotFound, ws.unbind(sid, "https://not-bound.org"))
    await refused(ws, NotFound, ws.unbind(sid, "9999"))
    await refused(ws, InvalidArgument, ws.trigger_add(sid, "never", []))
    await refused(ws, InvalidArgument, ws.trigger_add(sid, "every", ["0.1s"]))
    await refused(ws, InvalidArgument, ws.trigger_add(sid, "cron", ["not a cron"]))
    await refused(ws, InvalidArgument, ws.trigger_add(sid, "after", [str(sid)]))
    await refused(ws, SessionNotFound, ws.trigger_add(sid, "after", ["999"]))
    await refused(ws, NotFound, ws.trigger_remove(sid, 9999))
    await refused(ws, InvalidArgument, ws.migrate(sid, "bogus"))
    await refused(ws, InvalidArgument, ws.migrate(sid, "builtin:echo", window=-5))
    await refused(ws, ContextTooLarge, ws.migrate(sid, "builtin:echo", window=20))
    await refused(ws, SnapshotError, ws.load(str(tmp_path / "missing.json")))
    with pytest.raises(InvalidArgument):
        await ws.ps(state="zombie")
    assert len(await journal_all(ws)) == rows
    await check_all(ws)


async def test_send_many_with_one_bad_message_appends_nothing(ws: Workspace) -> None:
    sid = await session_with(ws, 2)
    good = {"role": "user", "content": "fine"}
    for bad in ({"role": "user"}, {"content": "no role"}, {"role": "alien", "content": "x"},
                {"role": "user", "content": 42}, "not an object"):
        await refused(ws, InvalidArgument, ws.send_many(sid, [good, good, bad, good]))
    assert len(await ws.history(sid)) == 2
    await check_tokens(ws, sid)


# ---------------------------------------------------------------- lifecycle table

CALLS = ("activate", "suspend", "resume", "interrupt", "cancel", "send", "memory", "nice", "compress", "expand",
         "migrate", "fork", "save", "merge-into", "merge-from", "bind", "trigger")
S, Q, R, T, Z = "sleeping", "ready", "running", "suspended", "terminated"
LIVE = {S, Q, R, T}
#: what DESIGN.md promises: call -> {state it is legal in: the state it leads to}
LEGAL: dict[str, dict[str, str]] = {
    "activate": {S: Q},
    "suspend": {S: T, Q: T, R: T},
    "resume": {T: "prior"},
    "interrupt": {R: S, Q: S},
    "cancel": {S: Z, Q: Z, R: Z, T: Z},
    "send": {s: s for s in LIVE},
    "memory": {s: s for s in LIVE},
    "nice": {s: s for s in LIVE},
    "bind": {s: s for s in LIVE},
    "trigger": {s: s for s in LIVE},
    "compress": {s: s for s in (S, Q, T)},
    "expand": {s: s for s in (S, Q, T)},
    "migrate": {s: s for s in (S, Q, T)},
    "fork": {s: s for s in (S, Q, R, T, Z)},
    "save": {s: s for s in (S, Q, R, T, Z)},
    "merge-into": {s: s for s in LIVE},
    "merge-from": {S: Z, Q: Z, T: Z},
}


async def _in_state(ws: Workspace, state: str, prior: str = S) -> int:
    sid = await session_with(ws, 12, f"in-{state}")
    await ws.compress(sid, 4)  # so that expand has something to undo
    await ws.memory_set(sid, "k", 1)
    if state == Q:
        await ws.activate(sid)
    elif state == T:
        if prior == Q:
            await ws.activate(sid)
        elif prior == R:
            force_state(ws.path, sid, R)
        await ws.suspend(sid)
    elif state == R:
        force_state(ws.path, sid, R)
    elif state == Z:
        await ws.cancel(sid)
    assert (await ws.info(sid)).state == state
    return sid


async def _call(ws: Workspace, call: str, sid: int, partner: int) -> Any:
    match call:
        case "activate" | "suspend" | "resume" | "interrupt" | "cancel":
            return await getattr(ws, call)(sid)
        case "send":
            return (await ws.send(sid, "a new message")).seq
        case "memory":
            return await ws.memory_set(sid, "k", 2)
        case "nice":
            return (await ws.nice(sid, 7)).priority
        case "bind":
            return (await ws.bind(sid, "url", "https://example.org")).resource.id
        case "trigger":
            return (await ws.trigger_add(sid, "inbox")).trigger.id
        case "compress":
            return (await ws.compress(sid, 1)).fold
        case "expand":
            return (await ws.expand(sid)).fold
        case "migrate":
            return await ws.migrate(sid, "builtin:echo")
        case "fork":
            return (await ws.fork(sid)).sid
        case "save":
            return (await ws.save(sid, "point")).checkpoint
        case "merge-into":
            return await ws.merge(partner, sid)
        case "merge-from":
            return await ws.merge(sid, partner)
    raise AssertionError(call)


@pytest.mark.parametrize("call", CALLS)
async def test_lifecycle_table(ws: Workspace, call: str) -> None:
    """Each call is accepted exactly in the states DESIGN.md allows, and leads where it says."""
    for state in (S, Q, R, T, Z):
        sid = await _in_state(ws, state)
        partner = (await ws.spawn(f"partner-{state}", "hr")).sid
        before_state = (await ws.info(sid)).state
        if state in LEGAL[call]:
            _, entry = await accepted(ws, call.split("-")[0], _call(ws, call, sid, partner))
            expected = LEGAL[call][state]
            if expected == "prior":
                expected = S
            assert (await ws.info(sid)).state == expected, (call, state)
        else:
            err = await refused(ws, IllegalTransition, _call(ws, call, sid, partner))
            assert err.state == before_state and err.sid == sid
            assert state in str(err)
        await check_tokens(ws, sid)


@pytest.mark.parametrize("prior", [S, Q, R])
async def test_resume_returns_to_the_state_it_was_suspended_in(ws: Workspace, prior: str) -> None:
    sid = await _in_state(ws, T, prior)
    assert (await ws.resume(sid)).state == prior
    assert (await ws.info(sid)).state == prior


async def test_terminated_stays_terminated(ws: Workspace) -> None:
    sid = await session_with(ws, 3)
    await ws.cancel(sid)
    info = await ws.info(sid)
    assert info.state == Z and info.reason == "cancelled"
    for call in ("activate", "suspend", "resume", "interrupt", "cancel", "send", "memory", "compress", "expand",
                 "merge-from", "merge-into", "migrate", "nice"):
        partner = (await ws.spawn("p", "hr")).sid
        await refused(ws, IllegalTransition, _call(ws, call, sid, partner))
    child = (await ws.fork(sid)).sid  # an ended session can still be forked...
    assert (await ws.info(child)).state == S
    await ws.save(sid, "end")  # ...and checkpointed
    assert (await ws.info(sid)).state == Z
    assert len(await ws.history(sid)) == 3


# ---------------------------------------------------------------- fork: copy-on-write


async def test_fork_copies_no_message_row(ws: Workspace) -> None:
    sid = await session_with(ws, 400)
    rows = count_rows(ws.path, "messages")
    child = (await ws.fork(sid)).sid
    grandchild = (await ws.fork(child)).sid
    early = (await ws.fork(sid, at=10)).sid
    assert count_rows(ws.path, "messages") == rows == 400
    parent_hist = await ws.history(sid)
    assert await ws.history(child) == parent_hist
    assert await ws.history(grandchild) == parent_hist
    assert await ws.history(early) == parent_hist[:10]
    for s in (sid, child, grandchild, early):
        await check_tokens(ws, s)
    # each new message is one row, wherever in the tree it is written
    await ws.send(grandchild, "only in the grandchild")
    assert count_rows(ws.path, "messages") == 401


async def test_fork_memory_is_copy_on_write(ws: Workspace) -> None:
    """A fork copies no memory row; a key changed on either side (set, deleted, merged in)
    leaves the other side's as it was; the merge base is the memory at the fork."""
    a = await session_with(ws, 1)
    await ws.memory_set_many(a, {f"k{i}": {"i": i} for i in range(1_000)})
    rows = count_rows(ws.store.path, "memory")
    kids = [(await ws.fork(a)).sid for _ in range(20)]
    grandchild = (await ws.fork(kids[0])).sid
    assert count_rows(ws.store.path, "memory") == rows
    base = (await ws.show(a)).memory
    for k in (*kids, grandchild):
        assert (await ws.show(k)).memory == base
    await ws.memory_set(kids[0], "k1", "child's")
    await ws.memory_delete(kids[0], "k2")  # inherited: a tombstone hides it
    await ws.memory_set(a, "k3", "parent's")
    await ws.memory_delete(a, "k4")
    await ws.memory_set(a, "new", 1)
    parent = (await ws.show(a)).memory
    assert parent["k1"] == {"i": 1} and parent["k2"] == {"i": 2} and parent["k3"] == "parent's"
    assert "k4" not in parent and parent["new"] == 1
    assert (await ws.show(kids[0])).memory == {**{x: v for x, v in base.items() if x != "k2"}, "k1": "child's"}
    for k in (kids[1], grandchild):  # the grandchild was forked before its parent changed
        assert (await ws.show(k)).memory == base
    assert await ws.memory_get(kids[1], "k4") == {"i": 4}
    with pytest.raises(NotFound):
        await ws.memory_get(kids[1], "new")
    # what the changes cost: one row each, whatever the forks reading them (the parent's three
    # changes are new versions, its deletion one marked gone; the child's own two)
    assert count_rows(ws.store.path, "memory") == rows + 3 + 2
    # a version no fork reads is replaced in place
    await ws.memory_set(a, "k3", "parent's again")
    await ws.memory_set(a, "new", 2)
    assert count_rows(ws.store.path, "memory") == rows + 3 + 2
    assert (await ws.show(kids[1])).memory == base
    # the base is the memory at the fork: the child's changes apply, the parent's are not undone
    merged = await ws.merge(kids[0], a)
    assert set(merged.memory_changed) == {"k1", "k2"}
    after = (await ws.show(a)).memory
    assert after["k1"] == "child's" and "k2" not in after and after["k3"] == "parent's again" and after["new"] == 2
    assert (await ws.show(grandchild)).memory == base
    await ws.memory_set(kids[1], "k3", "sibling's")  # changed on both sides since the fork: a conflict
    with pytest.raises(MergeConflict) as conflict:
        await ws.merge(kids[1], a)
    assert conflict.value.conflicts == {"k3": ({"i": 3}, "parent's again", "sibling's")}


async def test_long_transcripts_and_forks_across_write_batches(ws: Workspace) -> None:
    """More messages than one insert batch: seqs, token sums and forks stay exact."""
    sid = (await ws.spawn("big", "hr")).sid
    n = (await ws.send_many(sid, [{"role": "user", "content": f"entry {i}"} for i in range(23_456)])).count
    assert n == 23_456
    rows = count_rows(ws.path, "messages")
    child = (await ws.fork(sid, at=12_345)).sid
    assert count_rows(ws.path, "messages") == rows
    hist = await ws.history(child)
    assert len(hist) == 12_345 and hist[-1].content == "entry 12344" and hist[-1].seq == 12_345
    await check_tokens(ws, sid)
    await check_tokens(ws, child)


async def test_fork_history_is_parent_prefix_plus_own(ws: Workspace) -> None:
    a = await session_with(ws, 6, "a")
    b = (await ws.fork(a, "b")).sid
    await ws.send(a, "a after the fork")
    await ws.send(b, "b's own 1")
    await ws.send(b, "b's own 2", pin=True)
    c = (await ws.fork(b, "c", at=7)).sid  # a fork of a fork, inside b's own messages
    await ws.send(c, "c's own")
    d = (await ws.fork(a, "d", at=2)).sid
    await ws.send(d, "d's own")

    ha, hb, hc, hd = [await ws.history(x) for x in (a, b, c, d)]
    assert [m.content for m in ha[6:]] == ["a after the fork"]
    assert hb[:6] == ha[:6] and [m.content for m in hb[6:]] == ["b's own 1", "b's own 2"]
    assert hb[7].pinned
    assert hc[:7] == hb[:7] and [m.content for m in hc[7:]] == ["c's own"]
    assert hd[:2] == ha[:2] and [m.content for m in hd[2:]] == ["d's own"]
    assert [m.seq for m in hc] == [1, 2, 3, 4, 5, 6, 7, 8]
    # ranges through the fork chain
    assert await ws.history(c, 5, 8) == hc[5:8]
    ic = await ws.info(c)
    assert ic.parent == b and ic.fork_seq == 7 and ic.length == 8
    for s in (a, b, c, d):
        await check_tokens(ws, s)


async def test_fork_at_zero_and_of_an_empty_session(ws: Workspace) -> None:
    a = await session_with(ws, 3, system="Be brief.")
    z = (await ws.fork(a, at=0)).sid
    assert await ws.history(z) == [] and await ws.context(z) == []
    e = (await ws.spawn("empty", "hr")).sid
    f = (await ws.fork(e)).sid
    assert await ws.history(f) == []
    assert (await ws.show(z)).system == "Be brief."
    for s in (a, z, e, f):
        await check_tokens(ws, s)


async def test_fork_copies_memory_resources_and_disarms_triggers(ws: Workspace) -> None:
    a = await session_with(ws, 2)
    await ws.memory_set(a, "plan", ["x"])
    await ws.bind(a, "url", "https://example.org")
    await ws.trigger_add(a, "every", ["5m"])
    b = (await ws.fork(a)).sid
    db = await ws.show(b)
    assert db.memory == {"plan": ["x"]}
    assert [(r.kind, r.uri, r.mode) for r in db.resources] == [("url", "https://example.org", "rw")]
    assert [(t.kind, t.spec, t.armed) for t in db.info.triggers] == [("every", {"seconds": 300.0, "text": "5m"}, False)]
    assert [t.armed for t in await ws.triggers(a)] == [True]
    # the copies are independent
    await ws.memory_set(b, "plan", ["y"])
    assert await ws.memory_get(a, "plan") == ["x"]


async def test_fork_triggers_can_be_armed_by_approve(ws: Workspace) -> None:
    """Copied triggers arrive disarmed; the user must have a way to arm them after looking."""
    a = await session_with(ws, 1)
    await ws.trigger_add(a, "every", ["5m"])
    b = (await ws.fork(a)).sid
    assert [t.armed for t in await ws.triggers(b)] == [False]
    await ws.approve(b)
    assert [t.armed for t in await ws.triggers(b)] == [True]


async def test_fork_of_terminated_and_merged_sessions(ws: Workspace) -> None:
    a = await session_with(ws, 3)
    b = (await ws.fork(a)).sid
    await ws.send(b, "b work")
    await ws.merge(b, a)
    c = (await ws.fork(b)).sid  # b ended merged; its history is still there to fork
    assert [m.content for m in await ws.history(c)][-1] == "b work"
    await check_tokens(ws, c)


# ---------------------------------------------------------------- merge


async def test_merge_takes_one_sided_changes_and_joins_messages_with_provenance(ws: Workspace) -> None:
    a = await session_with(ws, 4, "a")
    await ws.memory_set(a, "same", 1)
    await ws.memory_set(a, "ours_only", 1)
    await ws.memory_set(a, "theirs_only", 1)
    await ws.memory_set(a, "deleted_there", 1)
    await ws.memory_set(a, "both_same", 1)
    await ws.bind(a, "url", "https://a.org")
    b = (await ws.fork(a, "b")).sid
    await ws.memory_set(a, "ours_only", 2)
    await ws.memory_set(b, "theirs_only", 3)
    await ws.memory_delete(b, "deleted_there")
    await ws.memory_set(b, "new_there", {"n": [1]})
    await ws.memory_set(a, "both_same", 9)
    await ws.memory_set(b, "both_same", 9)
    await ws.bind(b, "url", "https://b.org")
    await ws.send(a, "target's own after the fork")
    await ws.send(b, "first from b")
    await ws.send(b, "second from b", role="assistant", pin=True)
    hist_a = await ws.history(a)

    result, entry = await accepted(ws, "merge", ws.merge(b, a))
    assert result.source == b and result.sid == a and result.base == a
    assert result.messages == 2
    assert set(result.memory_changed) == {"theirs_only", "deleted_there", "new_there"}
    assert result.resources_added == 1
    assert (await ws.show(a)).memory == {
        "same": 1, "ours_only": 2, "theirs_only": 3, "new_there": {"n": [1]}, "both_same": 9,
    }
    merged = await ws.history(a)
    assert merged[:5] == hist_a
    joined = merged[5:]
    assert [(m.seq, m.role, m.content, m.pinned, m.author) for m in joined] == [
        (6, "user", "first from b", False, "user"), (7, "assistant", "second from b", True, "user")]
    assert [m.meta for m in joined] == [{"merged_from": b, "from_seq": 5}, {"merged_from": b, "from_seq": 6}]
    assert sorted(r.uri for r in (await ws.show(a)).resources) == ["https://a.org", "https://b.org"]
    info_b = await ws.info(b)
    assert info_b.state == State.TERMINATED and info_b.reason == "merged" and info_b.merged_into == a
    assert len(await ws.history(b)) == 6
    await check_tokens(ws, a)
    await check_tokens(ws, b)


async def test_merge_conflict_applies_nothing_and_reports_base_ours_theirs(ws: Workspace) -> None:
    a = await session_with(ws, 2, "a")
    await ws.memory_set(a, "k", "base")
    await ws.memory_set(a, "gone", 1)
    b = (await ws.fork(a)).sid
    await ws.memory_set(a, "k", "ours")
    await ws.memory_set(b, "k", "theirs")
    await ws.memory_delete(a, "gone")
    await ws.memory_set(b, "gone", 2)
    await ws.memory_set(b, "clean", True)  # a one-sided change: not applied either while conflicts remain
    await ws.send(b, "b message")
    err = await refused(ws, MergeConflict, ws.merge(b, a))
    assert err.conflicts == {"k": ("base", "ours", "theirs"), "gone": (1, MISSING, 2)}
    assert err.exit_code == 3
    assert (await ws.info(b)).state == State.SLEEPING
    # one key settled, one not: still refused, still nothing
    err = await refused(ws, MergeConflict, ws.merge(b, a, Resolution(picks={"k": "theirs"})))
    assert set(err.conflicts) == {"gone"}


@pytest.mark.parametrize(
    ("resolution", "expected"),
    [
        (Resolution(side="ours"), {"k": "ours", "j": "ours-j", "clean": True}),
        (Resolution(side="theirs"), {"k": "theirs", "j": "theirs-j", "clean": True}),
        (Resolution(picks={"k": "theirs", "j": "ours"}), {"k": "theirs", "j": "ours-j", "clean": True}),
        (Resolution(side="ours", picks={"j": "theirs"}), {"k": "ours", "j": "theirs-j", "clean": True}),
        (Resolution(side="theirs", values={"k": canonical({"v": 1})}), {"k": {"v": 1}, "j": "theirs-j", "clean": True}),
    ],
)
async def test_merge_resolutions(ws: Workspace, resolution: Resolution, expected: dict[str, Any]) -> None:
    a = await session_with(ws, 2, "a")
    await ws.memory_set(a, "k", "base")
    await ws.memory_set(a, "j", "base-j")
    b = (await ws.fork(a)).sid
    await ws.memory_set(a, "k", "ours")
    await ws.memory_set(a, "j", "ours-j")
    await ws.memory_set(b, "k", "theirs")
    await ws.memory_set(b, "j", "theirs-j")
    await ws.memory_set(b, "clean", True)
    result = await ws.merge(b, a, resolution)
    assert (await ws.show(a)).memory == expected
    assert set(result.resolved) == {"k", "j"}


async def test_merge_resolution_value_must_be_json(ws: Workspace) -> None:
    a = await session_with(ws, 1)
    b = (await ws.fork(a)).sid
    await ws.memory_set(a, "k", 1)
    await ws.memory_set(b, "k", 2)
    await refused(ws, InvalidArgument, ws.merge(b, a, Resolution(values={"k": "{not json"})))


async def test_merge_unrelated_sessions_uses_an_empty_base(ws: Workspace) -> None:
    a = await session_with(ws, 2, "a")
    b = await session_with(ws, 3, "b")
    await ws.memory_set(a, "shared", 1)
    await ws.memory_set(b, "shared", 2)
    await ws.memory_set(b, "only_b", "x")
    await ws.memory_set(a, "same", [1])
    await ws.memory_set(b, "same", [1])
    err = await refused(ws, MergeConflict, ws.merge(b, a))
    assert err.conflicts == {"shared": (MISSING, 1, 2)}
    result = await ws.merge(b, a, Resolution(side="ours"))
    assert result.base is None and result.messages == 3
    assert (await ws.show(a)).memory == {"shared": 1, "only_b": "x", "same": [1]}
    hist = await ws.history(a)
    assert [m.seq for m in hist] == [1, 2, 3, 4, 5]
    assert [m.meta["from_seq"] for m in hist[2:]] == [1, 2, 3]
    await check_tokens(ws, a)


async def test_merge_sibling_forks(ws: Workspace) -> None:
    root = await session_with(ws, 5, "root")
    await ws.memory_set(root, "k", 0)
    b = (await ws.fork(root, "b", at=3)).sid
    c = (await ws.fork(root, "c")).sid
    await ws.send(b, "b1")
    await ws.send(c, "c1")
    await ws.memory_set(b, "k", 1)
    await ws.memory_set(c, "other", 2)
    result = await ws.merge(b, c)
    assert result.base == root
    # b's history since the shared point (position 3) joins c
    hc = await ws.history(c)
    assert [m.content for m in hc] == [text(i) for i in range(1, 6)] + ["c1", "b1"]
    assert hc[6].meta == {"merged_from": b, "from_seq": 4}
    assert (await ws.show(c)).memory == {"k": 1, "other": 2}
    await check_tokens(ws, c)


async def test_merge_sibling_base_is_the_memory_both_sides_descend_from(ws: Workspace) -> None:
    """Siblings forked at different times: the base is the parent's memory at the *earlier*
    fork. A key the source never touched must not change in the target."""
    a = await session_with(ws, 8, "a")
    b = (await ws.fork(a, "b")).sid  # memory {}; forked first
    await ws.memory_set(a, "x", 1)
    c = (await ws.fork(a, "c", at=3)).sid  # memory {x: 1}; forked later, at an earlier message
    await ws.send(b, "b's work")
    await ws.merge(b, c)
    assert (await ws.show(c)).memory == {"x": 1}  # b never deleted x
    # and the other way round: c added nothing b lacks except x, which b never had
    d = (await ws.fork(a, "d")).sid  # memory {x: 1}, forked after e's source point
    e = (await ws.fork(a, "e", at=2)).sid  # memory {x: 1}
    await ws.memory_set(d, "y", 1)
    await ws.merge(d, e)
    assert (await ws.show(e)).memory == {"x": 1, "y": 1}


async def test_merge_base_of_a_restored_branch_is_its_checkpoint_memory(ws: Workspace) -> None:
    """A session restored from a checkpoint starts from the memory of the checkpoint's time,
    however late it is made: merging it must not undo what its parent did after that."""
    a = await session_with(ws, 4, "a")
    await ws.save(a, "early")  # memory {}
    await ws.memory_set(a, "x", 1)
    f = (await ws.fork(a, "f")).sid  # memory {x: 1}
    r = (await ws.load(a, "early")).sid  # memory {}: made after f, but from an older moment
    await ws.send(r, "work on the old branch")
    await ws.merge(r, f)
    assert (await ws.show(f)).memory == {"x": 1}  # r never touched x


async def test_merge_parent_into_child_and_child_into_parent(ws: Workspace) -> None:
    p = await session_with(ws, 4, "p")
    await ws.memory_set(p, "k", "base")
    c = (await ws.fork(p, "c")).sid
    await ws.send(p, "p1")
    await ws.memory_set(p, "k", "parent")
    await ws.send(c, "c1")
    await ws.memory_set(c, "mine", 1)
    # parent into child: the parent's messages since the fork join the child
    r = await ws.merge(p, c)
    assert r.base == p and r.messages == 1
    hc = await ws.history(c)
    assert [m.content for m in hc[4:]] == ["c1", "p1"]
    assert hc[5].meta == {"merged_from": p, "from_seq": 5}
    assert (await ws.show(c)).memory == {"k": "parent", "mine": 1}
    assert (await ws.info(p)).state == State.TERMINATED

    q = await session_with(ws, 3, "q")
    await ws.memory_set(q, "k", "base")
    d = (await ws.fork(q, "d")).sid
    g = (await ws.fork(d, "g")).sid  # grandchild
    await ws.send(g, "g1")
    await ws.send(g, "g2")
    await ws.memory_set(g, "k", "grandchild")
    await ws.send(q, "q1")
    # child (grandchild) into parent
    r = await ws.merge(g, q)
    assert r.base == q and r.messages == 2
    hq = await ws.history(q)
    assert [m.content for m in hq[3:]] == ["q1", "g1", "g2"]
    assert [m.meta for m in hq[4:]] == [{"merged_from": g, "from_seq": 4}, {"merged_from": g, "from_seq": 5}]
    assert (await ws.show(q)).memory == {"k": "grandchild"}
    for s in (p, c, q, d, g):
        await check_tokens(ws, s)


async def test_merge_into_compressed_target_and_from_a_fork_of_a_fork(ws: Workspace) -> None:
    a = await session_with(ws, 12, "a")
    b = (await ws.fork(a, "b", at=6)).sid
    c = (await ws.fork(b, "c")).sid
    await ws.send(c, "c1")
    await ws.compress(a, 2)
    ctx_before = await ws.context(a)
    r = await ws.merge(c, a)
    assert r.messages == 1 and r.base == a
    ctx = await ws.context(a)
    assert ctx[:-1] == ctx_before and ctx[-1].content == "c1"
    await check_tokens(ws, a)


async def test_merge_refusals(ws: Workspace) -> None:
    a = await session_with(ws, 2)
    b = (await ws.fork(a)).sid
    await refused(ws, InvalidArgument, ws.merge(a, a))
    force_state(ws.path, b, R)
    await refused(ws, IllegalTransition, ws.merge(b, a))  # a running source
    force_state(ws.path, b, S)
    await ws.merge(b, a)
    await refused(ws, IllegalTransition, ws.merge(b, a))  # merged once already
    c = (await ws.fork(a)).sid
    await ws.cancel(a)
    await refused(ws, IllegalTransition, ws.merge(c, a))  # into an ended session


# ---------------------------------------------------------------- compress / expand


async def test_compress_archives_and_expand_restores_exactly(ws: Workspace) -> None:
    sid = (await ws.spawn("c", "hr", system="You are the system prompt. " * 5)).sid
    await ws.send(sid, text(1))
    await ws.send(sid, "a rule of the house", role="system")
    for i in range(2, 8):
        await ws.send(sid, text(i), role="user" if i % 2 else "assistant")
    await ws.send(sid, "never forget this", pin=True)
    for i in range(8, 14):
        await ws.send(sid, text(i))
    hist = await ws.history(sid)
    before = await ws.context(sid)
    info_before = await ws.info(sid)

    fold = (await accepted(ws, "compress", ws.compress(sid, 3)))[0].fold
    ctx = await ws.context(sid)
    summaries = [i for i in ctx if i.fold is not None]
    assert len(summaries) == 1 and summaries[0].fold == fold.id
    assert ctx[-3:] == before[-3:]
    kept = [i for i in ctx if i.fold is None]
    assert [i.content for i in kept if i.role == "system" or i.pinned] == ["a rule of the house", "never forget this"]
    assert fold.archived_count == len(before) - len(kept)
    assert fold.archived_tokens == sum(i.tokens for i in before) - sum(i.tokens for i in kept)
    assert summaries[0].tokens == fold.summary_tokens < fold.archived_tokens
    assert await ws.history(sid) == hist  # archived, not deleted
    assert (await ws.show(sid)).system == "You are the system prompt. " * 5
    info = await ws.info(sid)
    assert info.context_tokens < info_before.context_tokens
    await check_tokens(ws, sid)

    await accepted(ws, "expand", ws.expand(sid))
    assert await ws.context(sid) == before
    assert (await ws.info(sid)).context_tokens == info_before.context_tokens
    await check_tokens(ws, sid)


async def test_nested_compress_with_messages_between_expands_exactly(ws: Workspace) -> None:
    sid = (await ws.spawn("n", "hr", system="sys")).sid
    await ws.send_many(sid, [{"role": "user", "content": text(i)} for i in range(10)])
    stages = []
    for round_ in range(3):
        stages.append((await ws.context(sid), (await ws.info(sid)).length))
        await ws.compress(sid, 2 + round_)
        await check_tokens(ws, sid)
        assert sum(1 for i in await ws.context(sid) if i.fold is not None) == 1
        await ws.send(sid, f"between {round_}. " + text(100 + round_))
        await ws.send(sid, f"pinned {round_}", pin=True)
        await ws.send(sid, text(200 + round_), role="assistant")
    hist = await ws.history(sid)
    for ctx_before, length_before in reversed(stages):
        await ws.expand(sid)
        await check_tokens(ws, sid)
        now = await ws.context(sid)
        since = hist[length_before:]
        assert now[: len(ctx_before)] == ctx_before
        assert [(i.seq, i.content, i.pinned) for i in now[len(ctx_before):]] == [
            (m.seq, m.content, m.pinned) for m in since]
    assert norm(await ws.context(sid)) == [
        (m.seq, m.role, m.content, m.tokens, m.author, m.pinned, False, 0, m.meta) for m in hist]
    await refused(ws, ProcessionError, ws.expand(sid))


async def test_compress_keeps_protected_items_and_refuses_when_nothing_to_do(ws: Workspace) -> None:
    sid = (await ws.spawn("p", "hr")).sid
    await ws.send(sid, "pinned one", pin=True)
    await ws.send(sid, "system one", role="system")
    await ws.send(sid, text(1))
    # all but the last item are protected: nothing to fold
    await refused(ws, ProcessionError, ws.compress(sid, 1))
    await refused(ws, ProcessionError, ws.compress(sid, 10))
    empty = (await ws.spawn("e", "hr")).sid
    await refused(ws, ProcessionError, ws.compress(empty, 0))


async def test_compress_and_expand_in_forks(ws: Workspace) -> None:
    a = await session_with(ws, 12)
    full = await ws.context(a)
    await ws.compress(a, 2)
    folded = await ws.context(a)
    b = (await ws.fork(a)).sid  # inherits the fold
    assert norm(await ws.context(b)) == norm(folded)
    e = (await ws.fork(a, at=5)).sid  # the fold reaches past 5: not inherited
    assert norm(await ws.context(e)) == norm(full[:5])
    await ws.expand(b)
    assert norm(await ws.context(b)) == norm(full)
    assert await ws.context(a) == folded  # the parent keeps its fold
    for s in (a, b, e):
        await check_tokens(ws, s)


async def test_compress_refused_while_running(ws: Workspace) -> None:
    sid = await session_with(ws, 12)
    await ws.compress(sid, 2)
    force_state(ws.path, sid, R)
    err = await refused(ws, IllegalTransition, ws.compress(sid, 1))
    assert "running" in str(err)
    await refused(ws, IllegalTransition, ws.expand(sid))
    await refused(ws, IllegalTransition, ws.migrate(sid, "builtin:echo"))


async def test_compress_a_long_history_is_fast_and_exact(ws: Workspace) -> None:
    sid = (await ws.spawn("long", "hr")).sid
    await ws.send_many(sid, [{"role": "user", "content": f"line {i} of a long log."} for i in range(5000)])
    before = await ws.context(sid)
    await ws.compress(sid, 10)
    assert len(await ws.context(sid)) == 11
    await check_tokens(ws, sid)
    await ws.expand(sid)
    assert await ws.context(sid) == before


async def test_fork_inside_nested_folds_keeps_only_the_folds_it_holds_whole(ws: Workspace) -> None:
    a = await session_with(ws, 8)
    first = (await ws.compress(a, 3)).fold  # folds 1..5
    await ws.send_many(a, [{"role": "user", "content": text(i)} for i in range(20, 26)])
    between = await ws.context(a)
    second = (await ws.compress(a, 2)).fold  # swallows the first summary: folds 1..12
    assert first.hi < 9 < second.hi
    child = (await ws.fork(a, at=9)).sid
    assert norm(await ws.context(child)) == norm([i for i in between if i.seq <= 9])
    await check_tokens(ws, child)
    await ws.expand(child)
    assert norm(await ws.context(child)) == [
        (m.seq, m.role, m.content, m.tokens, m.author, m.pinned, False, 0, m.meta) for m in await ws.history(child)]
    await check_tokens(ws, child)


# ---------------------------------------------------------------- tokens


async def test_context_tokens_are_maintained_by_every_call(ws: Workspace, tmp_path: Path) -> None:
    a = (await ws.spawn("a", "hr", system="A system prompt with a few words in it.")).sid
    await check_all(ws)
    await ws.send(a, "héllo wörld ✓ 日本語のテキスト")
    await ws.send_many(a, [{"role": "assistant", "content": text(i)} for i in range(15)])
    await check_all(ws)
    await ws.send(a, "pinned", pin=True)
    b = (await ws.fork(a, at=7)).sid
    await check_all(ws)
    await ws.compress(a, 3)
    await check_all(ws)
    c = (await ws.fork(a)).sid
    await ws.send(c, "c")
    await check_all(ws)
    await ws.compress(c, 1)
    await check_all(ws)
    await ws.send(b, "b")
    await ws.merge(b, c)
    await check_all(ws)
    await ws.save(c, "cp")
    await ws.send(c, "after the checkpoint")
    r = (await ws.load(c, "cp")).sid
    await check_all(ws)
    await ws.save(c, file=str(tmp_path / "c.json"))
    loaded = (await ws.load(str(tmp_path / "c.json"))).sid
    await check_all(ws)
    await ws.expand(c)
    await ws.expand(loaded)
    await check_all(ws)
    await ws.migrate(r, "builtin:echo", window=50_000)
    await ws.cancel(r)
    await check_all(ws)


# ---------------------------------------------------------------- save / restore (checkpoints)


async def test_checkpoint_restore_forks_at_the_point_with_the_memory_then(ws: Workspace) -> None:
    a = await session_with(ws, 5)
    await ws.memory_set(a, "k", "then")
    await ws.memory_set(a, "gone_later", 1)
    cp = (await accepted(ws, "save", ws.save(a, "v1")))[0].checkpoint
    assert cp.name == "v1" and cp.seq == 5
    hist_then = await ws.history(a)
    ctx_then = await ws.context(a)
    await ws.send(a, "after")
    await ws.memory_set(a, "k", "now")
    await ws.memory_delete(a, "gone_later")
    await ws.memory_set(a, "new", 2)

    r = (await accepted(ws, "load", ws.load(a, "v1")))[0].sid
    assert await ws.history(r) == hist_then
    assert norm(await ws.context(r)) == norm(ctx_then)
    assert (await ws.show(r)).memory == {"k": "then", "gone_later": 1}
    info = await ws.info(r)
    assert info.parent == a and info.fork_seq == 5 and info.state == State.SLEEPING
    # loading never destroys later history
    assert len(await ws.history(a)) == 6
    assert (await ws.show(a)).memory == {"k": "now", "new": 2}
    assert [c.name for c in (await ws.show(a)).checkpoints] == ["v1"]
    named = (await ws.load(a, "v1", name="second try")).sid
    assert (await ws.info(named)).name == "second try"
    for s in (a, r, named):
        await check_tokens(ws, s)


async def test_checkpoint_keeps_folds_of_its_time(ws: Workspace) -> None:
    a = await session_with(ws, 12)
    await ws.compress(a, 3)
    folded = await ws.context(a)
    await ws.save(a, "folded")
    await ws.expand(a)
    await ws.send(a, "more")
    r = (await ws.load(a, "folded")).sid
    assert norm(await ws.context(r)) == norm(folded)
    await ws.expand(r)
    assert norm(await ws.context(r)) == norm((await ws.context(a))[:12])
    await check_tokens(ws, r)


async def test_checkpoint_of_a_fork_restores_through_the_chain(ws: Workspace) -> None:
    a = await session_with(ws, 4)
    b = (await ws.fork(a, at=2)).sid
    await ws.send(b, "b1")
    await ws.save(b, "p")
    await ws.send(b, "b2")
    r = (await ws.load(b, "p")).sid
    assert await ws.history(r) == (await ws.history(b))[:3]
    await check_tokens(ws, r)


# ---------------------------------------------------------------- export / load (snapshot files)


async def _rich_session(ws: Workspace) -> int:
    a = (await ws.spawn("rich", "docs", system="You write docs.", goal="ship it", priority=3, window=64_000)).sid
    await ws.send(a, "rule", role="system")
    await ws.send_many(a, [{"role": "user" if i % 2 else "assistant", "content": text(i)} for i in range(14)])
    await ws.send(a, "keep me", pin=True)
    other = (await ws.spawn("other", "docs")).sid
    await ws.send(a, "from other", sender=other)
    await ws.memory_set(a, "plan", {"b": 2, "a": [1, None, "x"]})
    await ws.memory_set(a, "flag", False)
    await ws.bind(a, "url", "https://docs.example.org", mode="ro")
    await ws.bind(a, "folder", "/srv/docs")
    await ws.trigger_add(a, "every", ["5m"])
    await ws.trigger_add(a, "cron", ["0 9 1 * *"])
    await ws.trigger_add(a, "watch", ["/srv/docs/*.md"])
    await ws.compress(a, 4)
    return a


async def test_export_load_roundtrip(ws: Workspace, tmp_path: Path) -> None:
    a = await _rich_session(ws)
    f = tmp_path / "rich.json"
    out, _ = await accepted(ws, "save", ws.save(a, file=str(f)))
    assert out.file == str(f.resolve()) and out.messages == 17 and out.bytes == f.stat().st_size
    assert stat.S_IMODE(f.stat().st_mode) == 0o600
    doc = json.loads(f.read_bytes())
    assert doc["format"] == "procession.snapshot" and doc["version"] == 2 and doc["sha256"] == out.sha256

    new = (await accepted(ws, "load", ws.load(str(f))))[0].sid
    assert new != a
    src, dst = await ws.show(a), await ws.show(new)
    assert hist_key(await ws.history(new)) == hist_key(await ws.history(a))
    assert norm(dst.context) == norm(src.context)
    assert dst.memory == src.memory
    assert dst.system == src.system
    assert [(r.kind, r.uri, r.mode) for r in dst.resources] == [(r.kind, r.uri, r.mode) for r in src.resources]
    assert [(t.kind, t.spec) for t in dst.info.triggers] == [(t.kind, t.spec) for t in src.info.triggers]
    for field in ("name", "agent", "goal", "priority", "runner", "context_window", "context_tokens", "messages",
                  "length"):
        assert getattr(dst.info, field) == getattr(src.info, field), field
    assert dst.info.uuid != src.info.uuid and dst.info.state == State.SLEEPING
    # a file from elsewhere never runs anything by itself
    assert dst.info.armed is False
    assert [t.armed for t in dst.info.triggers] == [False, False, False]
    await ws.approve(new)
    assert (await ws.info(new)).armed is True
    assert [t.armed for t in await ws.triggers(new)] == [True, True, True]
    await ws.expand(new)
    await ws.expand(a)
    assert norm(await ws.context(new)) == norm(await ws.context(a))
    await check_tokens(ws, new)


async def test_load_keeps_message_timestamps(ws: Workspace, tmp_path: Path) -> None:
    """The snapshot records when each message was written; a roundtrip gives the same history."""
    a = await session_with(ws, 3)
    await ws.save(a, file=str(tmp_path / "a.json"))
    new = (await ws.load(str(tmp_path / "a.json"))).sid
    assert await ws.history(new) == await ws.history(a)


async def test_load_into_another_workspace(ws: Workspace, tmp_path: Path) -> None:
    a = await _rich_session(ws)
    f = tmp_path / "rich.json"
    await ws.save(a, file=str(f))
    other = await Workspace.open(tmp_path / "other.db")
    try:
        sid = (await other.load(str(f))).sid
        assert hist_key(await other.history(sid)) == hist_key(await ws.history(a))
        assert (await other.show(sid)).memory == (await ws.show(a)).memory
        await check_tokens(other, sid)
    finally:
        await other.close()


async def test_export_of_a_fork_is_self_contained(ws: Workspace, tmp_path: Path) -> None:
    a = await session_with(ws, 6)
    b = (await ws.fork(a, at=4)).sid
    await ws.send(b, "own")
    await ws.save(b, file=str(tmp_path / "b.json"))
    n = (await ws.load(str(tmp_path / "b.json"))).sid
    assert (await ws.info(n)).parent is None
    assert hist_key(await ws.history(n)) == hist_key(await ws.history(b))


async def test_nested_folds_load_alike_streamed_and_whole(ws: Workspace, tmp_path: Path) -> None:
    """A load counts what each fold hides without reading the history (a fold over an earlier
    one hides its summary; pinned and system messages stay): the file as written (streamed)
    and the same file rewritten by another tool (read whole) give the session saved."""
    a = await session_with(ws, 12)
    await ws.send(a, "keep this", pin=True)
    await ws.send(a, "a rule", role="system")
    await ws.send_many(a, [{"role": "user", "content": text(i)} for i in range(13, 25)])
    await ws.compress(a, 10)
    await ws.send_many(a, [{"role": "assistant", "content": text(i)} for i in range(25, 31)])
    await ws.compress(a, 3)
    await ws.compress(a, 2, summary="the whole story so far")
    assert len((await ws.show(a)).folds) == 3
    f = tmp_path / "nested.json"
    await ws.save(a, file=str(f))
    whole = tmp_path / "rewritten.json"
    whole.write_text(json.dumps(json.loads(f.read_bytes()), indent=1))
    levels = [norm(await ws.context(a))]
    source = (await ws.fork(a)).sid  # to expand, a compress at a time, as the copies will be
    for _ in range(3):
        await ws.expand(source)
        levels.append(norm(await ws.context(source)))
    for path in (f, whole):
        new = (await ws.load(str(path))).sid
        assert norm(await ws.context(new)) == levels[0]
        assert (await ws.info(new)).context_tokens == (await ws.info(a)).context_tokens
        await check_tokens(ws, new)
        for level in levels[1:]:  # each fold keeps its time: one expand undoes one compress, as in the source
            await ws.expand(new)
            await check_tokens(ws, new)
            assert norm(await ws.context(new)) == level
        assert len(await ws.context(new)) == (await ws.info(new)).length == 32


async def test_a_version_1_snapshot_loads_its_folds_as_one(ws: Workspace, tmp_path: Path) -> None:
    """Version 1 said no fold's time: its folds are all of the load's, and one expand undoes them."""
    a = await session_with(ws, 12)
    await ws.compress(a, 6)
    await ws.compress(a, 2)
    f = tmp_path / "v1.json"
    await ws.save(a, file=str(f))
    doc = json.loads(f.read_bytes())
    for fold in doc["payload"]["folds"]:
        del fold["created"]
    payload = json.dumps(doc["payload"], sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()
    f.write_bytes(b'{"format":"procession.snapshot","version":1,"sha256":"%s","payload":%s}\n'
                  % (hashlib.sha256(payload).hexdigest().encode(), payload))
    new = (await ws.load(str(f))).sid
    assert norm(await ws.context(new)) == norm(await ws.context(a))
    await ws.expand(new)
    assert len(await ws.context(new)) == (await ws.info(new)).length == 12
    doc["version"] = 3
    f.write_text(json.dumps(doc))
    with pytest.raises(SnapshotError, match="is snapshot version 3; this Procession reads versions 1 and 2"):
        await ws.load(str(f))


async def test_a_snapshot_as_written_is_refused_however_far_in_it_breaks(ws: Workspace, tmp_path: Path) -> None:
    """A file laid out as written and correctly hashed is refused at the message that is wrong,
    after its messages before were written: the load rolls back whole."""
    a = await session_with(ws, 40)
    f = tmp_path / "s.json"
    await ws.save(a, file=str(f))
    doc = json.loads(f.read_bytes())
    doc["payload"]["messages"][30]["role"] = "wizard"
    f.write_bytes(snapshot.dump(doc["payload"]))
    before = count_rows(ws.store.path, "messages"), count_rows(ws.store.path, "sessions")
    err = await refused(ws, SnapshotError, ws.load(str(f)))
    assert str(err) == f"{f} is not a valid snapshot: message 31 has a bad role"
    assert (count_rows(ws.store.path, "messages"), count_rows(ws.store.path, "sessions")) == before
    f.write_bytes(f.read_bytes().replace(b"wizard", b"user"))  # the hash no longer matches
    err = await refused(ws, SnapshotError, ws.load(str(f)))
    assert "does not match its content hash" in str(err)


def _rewrite(path: Path, mutate: Any, *, rehash: bool = False) -> None:
    doc = json.loads(path.read_bytes())
    mutate(doc)
    if rehash:
        import hashlib

        doc["sha256"] = hashlib.sha256(canonical_bytes(doc["payload"])).hexdigest()
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize(
    "damage",
    ["tampered", "truncated", "wrong_version", "not_json", "not_snapshot", "no_hash", "binary", "empty",
     "bad_role", "overlapping_fold", "bad_trigger", "list"],
)
async def test_damaged_snapshots_are_refused_and_change_nothing(ws: Workspace, tmp_path: Path, damage: str) -> None:
    a = await _rich_session(ws)
    f = tmp_path / "s.json"
    await ws.save(a, file=str(f))
    data = f.read_bytes()
    match damage:
        case "tampered":  # content changed, hash kept
            _rewrite(f, lambda d: d["payload"]["messages"][0].update(content="something else"))
        case "truncated":
            f.write_bytes(data[: len(data) // 2])
        case "wrong_version":
            _rewrite(f, lambda d: d.update(version=3))
        case "not_json":
            f.write_text("this is not json at all\n")
        case "not_snapshot":
            f.write_text(json.dumps({"hello": "world"}))
        case "no_hash":
            _rewrite(f, lambda d: d.pop("sha256"))
        case "binary":
            f.write_bytes(b"\x00\xff\xfe" * 100)
        case "empty":
            f.write_bytes(b"")
        case "bad_role":  # consistent hash, invalid content
            _rewrite(f, lambda d: d["payload"]["messages"][0].update(role="wizard"), rehash=True)
        case "overlapping_fold":
            _rewrite(f, lambda d: d["payload"]["folds"].extend([{"lo": 1, "hi": 3, "summary": "s"},
                                                              {"lo": 2, "hi": 5, "summary": "t"}]), rehash=True)
        case "bad_trigger":
            _rewrite(f, lambda d: d["payload"]["triggers"].append({"kind": "every", "spec": {"text": "0s"}}),
                     rehash=True)
        case "list":
            f.write_text("[1, 2, 3]")
    err = await refused(ws, SnapshotError, ws.load(str(f)))
    assert str(f) in str(err)


async def test_export_refused_leaves_no_file(ws: Workspace, tmp_path: Path) -> None:
    await refused(ws, ProcessionError, ws.save(1, file=str(tmp_path / "x.json")))
    sid = await session_with(ws, 1)
    await refused(ws, ProcessionError, ws.save(sid, file=str(tmp_path / "no-such-dir" / "x.json")))
    assert not (tmp_path / "no-such-dir").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


# ---------------------------------------------------------------- migrate


async def test_migrate_refuses_when_the_context_does_not_fit(ws: Workspace) -> None:
    sid = await session_with(ws, 20, system="sys")
    tokens = (await ws.info(sid)).context_tokens
    err = await refused(ws, ContextTooLarge, ws.migrate(sid, "openai:small", window=tokens - 1))
    assert str(tokens) in str(err)
    out, _ = await accepted(ws, "migrate", ws.migrate(sid, "openai:exact", window=tokens))
    assert (out.runner, out.window, out.context_tokens, out.fold, out.tokenizer) == (
        "openai:exact", tokens, tokens, None, ws.tokenizer)
    info = await ws.info(sid)
    assert info.runner == "openai:exact" and info.context_window == tokens


async def test_migrate_with_compress_folds_to_fit(ws: Workspace) -> None:
    sid = await session_with(ws, 30)
    hist = await ws.history(sid)
    before = await ws.context(sid)
    tokens = (await ws.info(sid)).context_tokens
    out = await ws.migrate(sid, "openai:small", window=tokens // 2, compress=True)
    info = await ws.info(sid)
    assert out.fold is not None and out.context_tokens == info.context_tokens <= tokens // 2
    assert info.context_window == tokens // 2 and info.runner == "openai:small"
    assert await ws.history(sid) == hist
    await check_tokens(ws, sid)
    await ws.expand(sid)
    assert await ws.context(sid) == before


async def test_migrate_with_compress_refuses_when_protected_items_alone_do_not_fit(ws: Workspace) -> None:
    sid = (await ws.spawn("big", "hr", system="s " * 400)).sid
    await ws.send_many(sid, [{"role": "user", "content": text(i)} for i in range(10)])
    await refused(ws, ContextTooLarge, ws.migrate(sid, "openai:tiny", window=150, compress=True))


# ---------------------------------------------------------------- send, memory, nice, bind, triggers


async def test_two_connections_writing_at_once_lose_nothing(ws: Workspace) -> None:
    other = await Workspace.open(ws.path, actor="tui")
    try:
        sid = (await ws.spawn("shared", "hr")).sid

        async def writer(w: Workspace, tag: str) -> None:
            for i in range(60):
                await w.send(sid, f"{tag} {i}")
                if i % 20 == 0:
                    await w.memory_set(sid, tag, i)

        await asyncio.gather(writer(ws, "cli"), writer(other, "tui"))
        hist = await ws.history(sid)
        assert [m.seq for m in hist] == list(range(1, 121))
        for tag in ("cli", "tui"):
            assert [m.content for m in hist if m.content.startswith(tag)] == [f"{tag} {i}" for i in range(60)]
        assert (await ws.show(sid)).memory == {"cli": 40, "tui": 40}
        assert len(await journal_all(ws)) == 1 + 2 * (60 + 3)
        await check_tokens(ws, sid)
    finally:
        await other.close()


async def test_inbox_trigger_wakes_a_sleeping_session_and_is_journaled(ws: Workspace) -> None:
    sid = (await ws.spawn("listener", "hr")).sid
    await ws.trigger_add(sid, "inbox")
    before = len(await journal_all(ws))
    await ws.send(sid, "you have mail")
    entries = (await journal_all(ws))[before:]
    assert [(e.call, e.actor) for e in entries] == [("send", "cli"), ("wake", "trigger")]
    assert (await ws.info(sid)).state == State.READY
    # suspended: the wake waits, and is delivered on resume
    await ws.interrupt(sid)
    await ws.suspend(sid)
    await ws.send(sid, "more mail")
    assert (await ws.info(sid)).state == State.SUSPENDED
    assert (await ws.resume(sid)).state == State.READY


async def test_unapproved_session_cannot_be_activated(ws: Workspace, tmp_path: Path) -> None:
    a = await session_with(ws, 2)
    await ws.save(a, file=str(tmp_path / "a.json"))
    b = (await ws.load(str(tmp_path / "a.json"))).sid
    await refused(ws, ProcessionError, ws.activate(b))
    await ws.approve(b)
    assert (await ws.activate(b)).state == State.READY


async def test_send_stores_content_exactly(ws: Workspace, store_kind: str) -> None:
    sid = (await ws.spawn("exact", "hr")).sid
    bodies = ["", "  spaced  ", "line1\nline2\r\n", "\x1b[31mred\x1b[0m", "emoji 🎉 and 日本語", "\x00nul"]
    if store_kind == "postgresql":  # PostgreSQL's text holds no NUL: refused in a line, nothing written
        with pytest.raises(InvalidArgument, match="NUL character"):
            await ws.send(sid, bodies.pop())
    for i, b in enumerate(bodies, start=1):
        assert (await ws.send(sid, b, role="tool" if i % 2 else "assistant")).seq == i
    assert [m.content for m in await ws.history(sid)] == bodies
    await check_tokens(ws, sid)


async def test_send_from_another_session_records_the_author(ws: Workspace) -> None:
    a = (await ws.spawn("a", "hr")).sid
    b = (await ws.spawn("b", "hr")).sid
    await ws.send(a, "hi", sender=b)
    assert (await ws.history(a))[0].author == f"session:{b}"


async def test_memory_values_are_json_and_compared_canonically(ws: Workspace) -> None:
    sid = (await ws.spawn("m", "hr")).sid
    values = {"null": None, "int": 3, "float": 2.5, "str": "s", "list": [1, [2]], "obj": {"z": 1, "a": 2},
              "bool": True, "unicode": "日本"}
    for k, v in values.items():
        await ws.memory_set(sid, k, v)
    assert (await ws.show(sid)).memory == values
    for k, v in values.items():
        assert await ws.memory_get(sid, k) == v
    await ws.memory_set(sid, "int", 4)
    assert await ws.memory_get(sid, "int") == 4
    await ws.memory_delete(sid, "null")
    with pytest.raises(NotFound):
        await ws.memory_get(sid, "null")


async def test_nice_absolute_and_relative(ws: Workspace) -> None:
    sid = (await ws.spawn("n", "hr", priority=10)).sid
    assert (await ws.nice(sid, 5, relative=True)).priority == 15
    assert (await ws.nice(sid, -3)).priority == -3
    await refused(ws, InvalidArgument, ws.nice(sid, -98, relative=True))
    assert (await ws.info(sid)).priority == -3


async def test_bind_and_unbind(ws: Workspace, tmp_path: Path) -> None:
    sid = (await ws.spawn("b", "hr", cwd=str(tmp_path))).sid
    rid = (await ws.bind(sid, "file", "notes/../todo.txt", mode="ro")).resource.id
    res = (await ws.show(sid)).resources
    assert [(r.id, r.kind, r.uri, r.mode) for r in res] == [(rid, "file", str(tmp_path / "todo.txt"), "ro")]
    await ws.unbind(sid, "todo.txt")  # by path, relative to the session's folder
    assert (await ws.show(sid)).resources == ()


async def test_triggers_add_and_remove(ws: Workspace) -> None:
    a = (await ws.spawn("a", "hr")).sid
    b = (await ws.spawn("b", "hr")).sid
    t1 = (await ws.trigger_add(a, "after", [str(b)])).trigger.id
    t2 = (await ws.trigger_add(a, "inbox")).trigger.id
    trigs = await ws.triggers(a)
    assert [(t.id, t.kind, t.spec, t.armed) for t in trigs] == [(t1, "after", {"session": b}, True),
                                                                 (t2, "inbox", {}, True)]
    await ws.trigger_remove(a, t1)
    assert [t.id for t in await ws.triggers(a)] == [t2]
    await refused(ws, InvalidArgument, ws.trigger_add(a, "watch", ["/tmp/x"], debounce_ms=-1))
    await refused(ws, InvalidArgument, ws.trigger_add(a, "every", ["5m"], debounce_ms=10))


async def test_ps_filters(ws: Workspace) -> None:
    a = (await ws.spawn("a", "hr")).sid
    b = (await ws.spawn("b", "docs")).sid
    await ws.activate(b)
    c = (await ws.spawn("c", "hr")).sid
    await ws.cancel(c)
    assert [s.id for s in await ws.ps()] == [a, b]
    assert [s.id for s in await ws.ps(all=True)] == [a, b, c]
    assert [s.id for s in await ws.ps(agent="hr")] == [a]
    assert [s.id for s in await ws.ps(state="ready")] == [b]
    assert [s.id for s in await ws.ps(state="terminated")] == [c]


async def test_spawn_defaults(ws: Workspace) -> None:
    sid = (await ws.spawn("d", "hr")).sid
    info = await ws.info(sid)
    assert info.state == State.SLEEPING and info.parent is None and info.messages == 0 and info.length == 0
    assert info.context_tokens == 0 and info.armed is True and info.cwd == os.getcwd()
    assert info.context_window == 128_000 and info.runner == "builtin:digest"
    sid2 = (await ws.spawn("d", "hr")).sid  # names need not be unique; SIDs are
    assert sid2 == sid + 1


async def test_an_inbox_cause_carries_the_messages_it_was_woken_by(ws: Workspace) -> None:
    sid = (await ws.spawn("inbox", "hr")).sid
    other = (await ws.spawn("peer", "hr")).sid
    await ws.trigger_add(sid, "inbox")
    await ws.send(sid, "please look at invoice 7", sender=other)
    await ws.send_many(sid, [{"role": "user", "content": "x" * 3000}, {"role": "user", "content": "second"}])
    async with ws.store.snapshot() as tx:
        causes = json.loads(await tx.value("SELECT causes FROM sessions WHERE id = ?", (sid,)))
    assert causes[0]["from"] == f"session:{other}" and causes[0]["count"] == 1
    assert causes[0]["messages"] == [{"seq": 1, "author": f"session:{other}", "role": "user",
                                      "text": "please look at invoice 7"}]
    many = causes[1]["messages"]
    assert [m["seq"] for m in many] == [2, 3] and many[0]["cut"] == 3000 and len(many[0]["text"]) == 2000


async def test_fork_names_do_not_grow(ws: Workspace) -> None:
    sid = (await ws.spawn("review", "hr")).sid
    names = []
    parent = sid
    for _ in range(4):
        parent = (await ws.fork(parent)).sid
        names.append((await ws.info(parent)).name)
    assert names == ["review #2", "review #3", "review #4", "review #5"]
    # a renamed fork frees its number: the next fork takes the smallest free one; a name of the
    # base that is not a number, or the parent's own number, takes none
    await ws.set(parent - 2, name="kept")
    assert (await ws.info((await ws.fork(sid)).sid)).name == "review #3"
    assert (await ws.info((await ws.fork(sid)).sid)).name == "review #6"
    await ws.spawn("review #notes", "hr")
    first = (await ws.spawn("task #1", "hr")).sid
    assert (await ws.info((await ws.fork(first)).sid)).name == "task #2"
    assert (await ws.info((await ws.fork(sid)).sid)).name == "review #7"
    # a name holding what a pattern would read as wildcards, or the ends of the name range
    for odd, decoy in (("50% off_", "50x offy #2"), ("a #b $c", "a #b $c$ #2")):
        odd_sid = (await ws.spawn(odd, "hr")).sid
        await ws.spawn(decoy, "hr")
        assert (await ws.info((await ws.fork(odd_sid)).sid)).name == f"{odd} #2"
    # past 64 forks of a base (a loop forking on), numbered in turn without reading them all
    many = (await ws.spawn("loop", "hr")).sid
    names = [(await ws.info((await ws.fork(many)).sid)).name for _ in range(70)]
    assert names == [f"loop #{n}" for n in range(2, 72)]
