"""Random sequences of system calls against a pure-Python model of what they must do.

Hypothesis drives a ``RuleBasedStateMachine`` over a real workspace file: spawn, send (also
pinned, system and tool messages, and whole transcripts), memory set/delete/set many (copy-on-write
across forks: a fork copies no memory row), fork (of forks,
and ``at=`` earlier points), merge (settled by side, or refused with its conflicts), compress
(random ``keep_last``), expand, checkpoint save/restore, snapshot export/load, approve,
bind, triggers and the lifecycle calls. After every step, every session must match the
model: its whole history (nothing lost, nothing reordered, forks = parent prefix + own), its
active context (expand restores exactly what compress hid), its token totals, memory,
resources, triggers and state (terminated stays terminated); and the journal must hold
exactly one row per accepted call (plus one ``wake`` row per trigger a call fired) and
none for a refused call, whose store is unchanged byte for byte.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from conftest import dump
from procession import (
    ContextTooLarge,
    IllegalTransition,
    InvalidArgument,
    MergeConflict,
    NotFound,
    ProcessionError,
    Resolution,
    SessionNotFound,
    Workspace,
)
from procession.calls.merge import MISSING, canonical

S, Q, T, Z = "sleeping", "ready", "suspended", "terminated"

SENTENCES = (
    "The ledger for the northern region needs a second look before Friday.",
    "Compare every invoice against the purchase orders and flag mismatches.",
    "The customer asked whether the refund policy covers damaged shipments.",
    "Summarise the meeting notes and send them to the whole team.",
)
KEYS = ("plan", "owner", "done")
VALUES = (0, 1, "x", None, [1, 2], {"a": 1})
URIS = ("https://a.example", "https://b.example", "https://c.example")
MAX_SESSIONS = 7  # sessions made by spawn, fork, restore, load: few, so that calls meet each other
PICK = st.integers(min_value=0, max_value=1_000_000)
ROLES = st.sampled_from(["user", "user", "user", "assistant", "assistant", "assistant", "system", "tool"])
PIN = st.sampled_from([False, False, False, True])
TRIGGER_SPECS = {"inbox": ((), {}), "every": (("5m",), {"seconds": 300.0, "text": "5m"})}

Item = tuple[Any, ...]  # (seq, role, content, tokens, author, pinned, is_summary, folded, meta)


@dataclass
class Msg:
    role: str
    content: str
    author: str
    pinned: bool
    meta: dict[str, Any] | None = None


@dataclass
class Entry:
    """One compress in force: the context before it and right after it, and the history length then."""

    hi: int
    before: list[Item]
    len_before: int
    after: list[Item]
    len_after: int


@dataclass
class Trig:
    kind: str
    spec: dict[str, Any]
    armed: bool
    fired: int = 0
    pending: bool = False


@dataclass
class Sess:
    id: int
    system: str
    history: list[Msg] = field(default_factory=list)
    memory: dict[str, str] = field(default_factory=dict)  # canonical JSON text
    state: str = S
    reason: str | None = None
    resume_to: str | None = None
    parent: int | None = None
    fork_seq: int = 0
    base_memory: dict[str, str] = field(default_factory=dict)
    base_tick: int = 0  # when the memory it started from was taken
    stack: list[Entry] = field(default_factory=list)
    checkpoints: dict[str, tuple[int, dict[str, str], list[Entry], int]] = field(default_factory=dict)
    resources: dict[tuple[str, str], str] = field(default_factory=dict)
    triggers: list[Trig] = field(default_factory=list)
    armed: bool = True


def protected(item: Item) -> bool:
    return not item[6] and (item[5] or item[1] == "system")


def norm(items: Any) -> list[Item]:
    return [(i.seq, i.role, i.content, i.tokens, i.author, i.pinned, i.fold is not None, i.folded, i.meta)
            for i in items]


class ProcessionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="procession-sm-"))
        self.path = self.dir / "ws.db"
        self.loop = asyncio.new_event_loop()
        self.ws: Workspace = self.run(Workspace.open(self.path))
        self.count = self.ws.store.count_tokens
        self.sessions: dict[int, Sess] = {}
        self.calls = 0  # accepted calls: one journal row each
        self.wakes = 0  # triggers fired by those calls: one `wake` row each
        self.tick = 0
        self.serial = 0

    def teardown(self) -> None:
        try:
            self.run(self.ws.close())
        finally:
            self.loop.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------ plumbing

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def accept(self, coro: Any) -> Any:
        result = self.run(coro)
        self.calls += 1
        self.tick += 1
        return result

    def refuse(self, exc_type: type[ProcessionError], coro: Any) -> ProcessionError:
        before = dump(self.path)
        with pytest.raises(exc_type) as info:
            self.run(coro)
        assert dump(self.path) == before, f"a refused call ({exc_type.__name__}) changed the store"
        return info.value

    def pick(self, n: int) -> Sess:
        """Session number ``n``, counting live sessions first (small numbers are drawn most)."""
        ids = sorted(self.sessions, key=lambda sid: (self.sessions[sid].state == Z, sid))
        return self.sessions[ids[n % len(ids)]]

    def text(self, size: int) -> str:
        self.serial += 1
        body = " ".join(SENTENCES[(self.serial + k) % len(SENTENCES)] for k in range(size))
        return f"Note {self.serial}. {body}".strip()

    def raw(self, msgs: list[Msg], start: int) -> list[Item]:
        return [(start + k + 1, m.role, m.content, self.count(m.content), m.author, m.pinned, False, 0, m.meta)
                for k, m in enumerate(msgs)]

    def expected_context(self, s: Sess) -> list[Item]:
        if not s.stack:
            return self.raw(s.history, 0)
        top = s.stack[-1]
        return top.after + self.raw(s.history[top.len_after:], top.len_after)

    def deliver(self, s: Sess) -> None:
        """Messages arrived: inbox triggers fire (when the session and trigger are armed)."""
        for t in s.triggers:
            if t.kind != "inbox" or not t.armed or not s.armed:
                continue
            if s.state in (S, Q):
                s.state = Q
            else:
                t.pending = True
            t.fired += 1
            self.wakes += 1

    @staticmethod
    def inherit(stack: list[Entry], at: int) -> list[Entry]:
        """The compresses a branch at ``at`` keeps: those wholly inside its history."""
        return [Entry(e.hi, [i for i in e.before if i[0] <= at], min(e.len_before, at),
                      [i for i in e.after if i[0] <= at], min(e.len_after, at))
                for e in stack if e.hi <= at]

    def branch(self, s: Sess, sid: int, at: int, memory: dict[str, str], stack: list[Entry], tick: int) -> Sess:
        return Sess(
            id=sid, system=s.system, history=list(s.history[:at]), memory=dict(memory), parent=s.id, fork_seq=at,
            base_memory=dict(memory), base_tick=tick, stack=copy.deepcopy(stack), resources=dict(s.resources),
            triggers=[Trig(t.kind, dict(t.spec), False) for t in s.triggers], armed=s.armed,
        )

    def chain(self, s: Sess) -> list[Sess]:
        out = [s]
        while out[-1].parent is not None:
            out.append(self.sessions[out[-1].parent])
        return out

    def ancestor(self, src: Sess, tgt: Sess) -> tuple[int | None, int, dict[str, str]]:
        """Where the two histories part, and the memory both sides descend from."""
        source, target = self.chain(src), self.chain(tgt)
        where = {x.id: i for i, x in enumerate(source)}
        for j, link in enumerate(target):
            i = where.get(link.id)
            if i is None:
                continue
            via_s = source[i - 1] if i else None
            via_t = target[j - 1] if j else None
            point_s = via_s.fork_seq if via_s else len(link.history)
            point_t = via_t.fork_seq if via_t else len(link.history)
            earliest = min((v for v in (via_s, via_t) if v is not None), key=lambda v: v.base_tick)
            return link.id, min(point_s, point_t), dict(earliest.base_memory)
        return None, 0, {}

    # ------------------------------------------------------------ rules

    @initialize(transcript=st.integers(0, 12))
    def first(self, transcript: int) -> None:
        self.spawn(system="You are a careful assistant.", transcript=transcript)

    @precondition(lambda self: len(self.sessions) < 3)
    @rule(system=st.sampled_from(["", "You are a careful assistant.", "Answer briefly."]),
          transcript=st.integers(0, 12))
    def spawn(self, system: str, transcript: int) -> None:
        """A new session, usually with a transcript to start from (one more call)."""
        sid = self.accept(self.ws.spawn(f"s{len(self.sessions) + 1}", "agent", system=system)).sid
        assert sid not in self.sessions
        s = self.sessions[sid] = Sess(id=sid, system=system, base_tick=self.tick)
        if transcript:
            msgs = [Msg("user" if k % 2 else "assistant", self.text(1 + k % 3), "user", k % 5 == 4)
                    for k in range(transcript)]
            self.accept(self.ws.send_many(sid, [{"role": m.role, "content": m.content, "pinned": m.pinned}
                                                for m in msgs]))
            s.history += msgs

    @rule(pick=PICK, role=ROLES, pin=PIN, size=st.integers(1, 3))
    def send(self, pick: int, role: str, pin: bool, size: int) -> None:
        s = self.pick(pick)
        text = self.text(size)
        call = self.ws.send(s.id, text, role=role, pin=pin)
        if s.state == Z:
            self.refuse(IllegalTransition, call)
            return
        seq = self.accept(call).seq
        s.history.append(Msg(role, text, "user", pin))
        assert seq == len(s.history)
        self.deliver(s)

    @rule(pick=PICK, other=PICK)
    def send_from_session(self, pick: int, other: int) -> None:
        s, o = self.pick(pick), self.pick(other)
        text = self.text(1)
        call = self.ws.send(s.id, text, sender=o.id)
        if s.state == Z:
            self.refuse(IllegalTransition, call)
        elif s.id == o.id:
            self.refuse(InvalidArgument, call)
        else:
            self.accept(call)
            s.history.append(Msg("user", text, f"session:{o.id}", False))
            self.deliver(s)

    @rule(pick=PICK, specs=st.lists(st.tuples(ROLES, PIN, st.integers(0, 3)), max_size=6),
          bad=st.sampled_from([None, None, None, None, 0, -1]))
    def send_many(self, pick: int, specs: list[tuple[str, bool, int]], bad: int | None) -> None:
        s = self.pick(pick)
        msgs = [{"role": r, "content": self.text(n), "pinned": p} for r, p, n in specs]
        if bad is not None:
            msgs.insert(bad if bad >= 0 else len(msgs), {"role": "user", "content": None})
        call = self.ws.send_many(s.id, msgs)
        if s.state == Z:
            self.refuse(IllegalTransition, call)
        elif bad is not None or not msgs:  # a bad message, or an empty transcript
            self.refuse(InvalidArgument, call)
        else:
            assert self.accept(call).count == len(msgs)
            s.history += [Msg(m["role"], m["content"], "user", m["pinned"]) for m in msgs]
            self.deliver(s)

    @rule(pick=PICK, key=st.sampled_from(KEYS), value=st.sampled_from(VALUES))
    def memory_set(self, pick: int, key: str, value: Any) -> None:
        self.set_memory(self.pick(pick), key, value)

    def set_memory(self, s: Sess, key: str, value: Any) -> None:
        call = self.ws.memory_set(s.id, key, value)
        if s.state == Z:
            self.refuse(IllegalTransition, call)
            return
        self.accept(call)
        s.memory[key] = canonical(value)

    @rule(pick=PICK, values=st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3),
          bad=st.booleans())
    def memory_set_many(self, pick: int, values: dict[str, Any], bad: bool) -> None:
        """Many keys in one call: all or, with one bad key, none; a fork's memory rows grow by
        what it changes, its parent's by nothing (but for the values its forks read, kept)."""
        s = self.pick(pick)
        call = self.ws.memory_set_many(s.id, {**values, **({"": 1} if bad else {})})
        if s.state == Z:
            self.refuse(IllegalTransition, call)
        elif bad or not values:
            self.refuse(InvalidArgument, call)
        else:
            self.accept(call)
            s.memory.update({k: canonical(v) for k, v in values.items()})

    @rule(pick=PICK, key=st.sampled_from(KEYS))
    def memory_delete(self, pick: int, key: str) -> None:
        s = self.pick(pick)
        call = self.ws.memory_delete(s.id, key)
        if s.state == Z:
            self.refuse(IllegalTransition, call)
        elif key not in s.memory:
            self.refuse(NotFound, call)
        else:
            self.accept(call)
            del s.memory[key]

    @precondition(lambda self: len(self.sessions) < MAX_SESSIONS)
    @rule(pick=PICK, at=st.one_of(st.none(), st.integers(0, 1_000_000)), beyond=st.booleans())
    def fork(self, pick: int, at: int | None, beyond: bool) -> None:
        s = self.pick(pick)
        if at is not None and beyond:
            self.refuse(InvalidArgument, self.ws.fork(s.id, at=len(s.history) + 1 + at % 3))
            return
        self.make_fork(s, at)

    def make_fork(self, s: Sess, at: int | None) -> Sess:
        point = len(s.history) if at is None else at % (len(s.history) + 1)
        rows, memory = self.message_rows(), self.memory_rows()
        child = self.accept(self.ws.fork(s.id, at=None if at is None else point)).sid
        assert self.message_rows() == rows, "a fork copied message rows"
        assert self.memory_rows() == memory, "a fork copied memory rows"
        assert child not in self.sessions
        self.sessions[child] = self.branch(s, child, point, s.memory, self.inherit(s.stack, point), self.tick)
        return self.sessions[child]

    @precondition(lambda self: len(self.sessions) < MAX_SESSIONS - 1)
    @rule(pick=PICK, first=st.one_of(st.none(), st.integers(0, 1_000_000)),
          second=st.one_of(st.none(), st.integers(0, 1_000_000)), key=st.sampled_from(KEYS),
          value=st.sampled_from(VALUES), between=st.booleans())
    def fork_twice(self, pick: int, first: int | None, second: int | None, key: str, value: Any,
                   between: bool) -> None:
        """Two branches of one session, maybe with its memory changed between them (siblings to merge)."""
        s = self.pick(pick)
        self.make_fork(s, first)
        if between:
            self.set_memory(s, key, value)
        self.make_fork(s, second)

    def message_rows(self) -> int:
        return self.rows("messages")

    def memory_rows(self) -> int:
        return self.rows("memory") + self.rows("memory_base")

    def rows(self, table: str) -> int:
        con = sqlite3.connect(self.path)
        try:
            return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        finally:
            con.close()

    @rule(src=PICK, tgt=PICK, side=st.sampled_from([None, "ours", "theirs"]),
          whom=st.sampled_from(["kin", "kin", "kin", "any", "itself"]))
    def merge(self, src: int, tgt: int, side: str | None, whom: str) -> None:
        a = self.pick(src)
        live = [x for x in sorted(self.sessions) if x != a.id and self.sessions[x].state != Z]
        root = self.chain(a)[-1].id
        kin = [x for x in live if self.chain(self.sessions[x])[-1].id == root]
        # mostly a live relative (the interesting merges), sometimes anyone, sometimes itself
        pool = {"kin": kin or live, "any": live}.get(whom) or [a.id]
        b = self.sessions[pool[tgt % len(pool)]]
        call = self.ws.merge(a.id, b.id, Resolution(side=side))
        if a.id == b.id:
            self.refuse(InvalidArgument, call)
            return
        if a.state == Z or b.state == Z:
            self.refuse(IllegalTransition, call)
            return
        if not a.armed:  # what came from a snapshot file joins nothing before it is approved
            self.refuse(ProcessionError, call)
            return
        base_sid, seq, base = self.ancestor(a, b)
        changes: dict[str, Any] = {}
        conflicts: dict[str, tuple[Any, Any, Any]] = {}
        for key in sorted(base.keys() | a.memory.keys() | b.memory.keys()):
            o, t, bb = b.memory.get(key, MISSING), a.memory.get(key, MISSING), base.get(key, MISSING)
            if o == t or t == bb:
                continue
            if o == bb or side == "theirs":
                changes[key] = t
            elif side is None:
                conflicts[key] = tuple(v if v is MISSING else json.loads(v) for v in (bb, o, t))
        if conflicts:
            err = self.refuse(MergeConflict, call)
            assert err.conflicts == conflicts
            return
        result = self.accept(call)
        joining = a.history[seq:]
        assert result.messages == len(joining) and result.base == base_sid
        b.history += [Msg(m.role, m.content, m.author, m.pinned,
                          {**(m.meta or {}), "merged_from": a.id, "from_seq": seq + k + 1})
                      for k, m in enumerate(joining)]
        for key, value in changes.items():
            if value is MISSING:
                b.memory.pop(key, None)
            else:
                b.memory[key] = value
        for key, mode in a.resources.items():
            b.resources.setdefault(key, mode)
        a.state, a.reason, a.resume_to = Z, "merged", None

    @rule(pick=PICK, keep=st.integers(0, 4))
    def compress(self, pick: int, keep: int) -> None:
        s = self.pick(pick)
        call = self.ws.compress(s.id, keep)
        if s.state == Z:
            self.refuse(IllegalTransition, call)
            return
        before = self.expected_context(s)
        archived = [i for i in before[: max(len(before) - keep, 0)] if not protected(i)]
        if not archived:
            self.refuse(ProcessionError, call)
            return
        store = dump(self.path)
        try:
            fold = self.accept(call).fold
        except ProcessionError as exc:  # the summary would not be smaller: also "nothing to compress"
            assert type(exc) is ProcessionError and "nothing to compress" in str(exc)
            assert dump(self.path) == store
            return
        after = norm(self.run(self.ws.context(s.id)))
        summaries = [k for k, i in enumerate(after) if i[6]]
        assert len(summaries) == 1, "compress left more than one summary in the context"
        first = before.index(archived[0])
        assert summaries[0] == first and after[:first] == before[:first]
        assert after[first][7] == fold.archived_count == len(archived)
        assert fold.archived_tokens == sum(i[3] for i in archived)
        assert after[first][3] == fold.summary_tokens < fold.archived_tokens
        gone = {(i[0], i[6]) for i in archived}
        assert [i for i in after if not i[6]] == [i for i in before if (i[0], i[6]) not in gone]
        if keep:
            assert after[-keep:] == before[-keep:]
        s.stack.append(Entry(fold.hi, before, len(s.history), after, len(s.history)))

    @rule(pick=PICK)
    def expand(self, pick: int) -> None:
        s = self.pick(pick)
        call = self.ws.expand(s.id)
        if s.state == Z:
            self.refuse(IllegalTransition, call)
        elif not s.stack:
            self.refuse(ProcessionError, call)
        else:
            self.accept(call)
            entry = s.stack.pop()
            restored = entry.before + self.raw(s.history[entry.len_before:], entry.len_before)
            assert norm(self.run(self.ws.context(s.id))) == restored, "expand did not restore the context"

    @rule(pick=PICK, name=st.sampled_from(["p", "q"]))
    def save(self, pick: int, name: str) -> None:
        s = self.pick(pick)
        call = self.ws.save(s.id, name)
        if name in s.checkpoints:
            self.refuse(InvalidArgument, call)
            return
        cp = self.accept(call).checkpoint
        assert cp.seq == len(s.history)
        s.checkpoints[name] = (len(s.history), dict(s.memory), copy.deepcopy(s.stack), self.tick)

    @precondition(lambda self: len(self.sessions) < MAX_SESSIONS)
    @rule(pick=PICK, name=st.sampled_from(["p", "q"]), saved=st.booleans())
    def restore(self, pick: int, name: str, saved: bool) -> None:
        s = self.pick(pick)
        with_points = [x for x in sorted(self.sessions) if self.sessions[x].checkpoints]
        if saved and with_points:  # mostly a session that has checkpoints, and one of them
            s = self.sessions[with_points[pick % len(with_points)]]
            name = sorted(s.checkpoints)[pick % len(s.checkpoints)]
        call = self.ws.load(s.id, name)
        if name not in s.checkpoints:
            self.refuse(NotFound, call)
            return
        seq, memory, stack, tick = s.checkpoints[name]
        child = self.accept(call).sid
        self.sessions[child] = self.branch(s, child, seq, memory, stack, tick)

    @precondition(lambda self: len(self.sessions) < MAX_SESSIONS - 2)
    @rule(pick=PICK)
    def export_load(self, pick: int) -> None:
        s = self.pick(pick)
        self.serial += 1
        file = str(self.dir / f"snap{self.serial}.json")
        self.accept(self.ws.save(s.id, file=file))
        sid = self.accept(self.ws.load(file)).sid
        assert sid not in self.sessions
        self.sessions[sid] = Sess(
            id=sid, system=s.system, history=[Msg(m.role, m.content, m.author, m.pinned, copy.deepcopy(m.meta))
                                              for m in s.history],
            memory=dict(s.memory), base_tick=self.tick, stack=copy.deepcopy(s.stack), resources=dict(s.resources),
            triggers=[Trig(t.kind, dict(t.spec), False) for t in s.triggers if t.kind != "after"], armed=False,
        )

    @rule(pick=PICK, waiting=st.booleans())
    def approve(self, pick: int, waiting: bool) -> None:
        s = self.pick(pick)
        unapproved = [x for x in sorted(self.sessions) if not self.sessions[x].armed]
        if waiting and unapproved:
            s = self.sessions[unapproved[pick % len(unapproved)]]
        call = self.ws.approve(s.id)
        if s.state == Z:
            self.refuse(IllegalTransition, call)
        elif s.armed and all(t.armed for t in s.triggers):
            self.refuse(ProcessionError, call)
        else:
            self.accept(call)
            s.armed = True
            for t in s.triggers:
                t.armed = True

    @rule(pick=PICK, call=st.sampled_from(["activate", "suspend", "resume", "interrupt", "cancel"]))
    def lifecycle(self, pick: int, call: str) -> None:
        s = self.pick(pick)
        coro = getattr(self.ws, call)(s.id)
        legal = {"activate": (S,), "suspend": (S, Q), "resume": (T,), "interrupt": (Q,), "cancel": (S, Q, T)}[call]
        if s.state not in legal:
            err = self.refuse(IllegalTransition, coro)
            assert err.state == s.state
            return
        if call == "activate" and not s.armed:
            self.refuse(ProcessionError, coro)
            return
        state = self.accept(coro).state
        if call == "activate":
            s.state = Q
        elif call == "suspend":
            s.resume_to, s.state = s.state, T
        elif call == "resume":
            s.state, s.resume_to = s.resume_to or S, None
            if any(t.pending for t in s.triggers):
                for t in s.triggers:
                    t.pending = False
                s.state = Q
        elif call == "interrupt":
            s.state = S
        else:
            s.state, s.reason, s.resume_to = Z, "cancelled", None
        assert state == s.state

    @rule(pick=PICK, uri=st.sampled_from(URIS), mode=st.sampled_from(["ro", "rw"]))
    def bind(self, pick: int, uri: str, mode: str) -> None:
        s = self.pick(pick)
        call = self.ws.bind(s.id, "url", uri, mode=mode)
        if s.state == Z:
            self.refuse(IllegalTransition, call)
        elif ("url", uri) in s.resources:
            self.refuse(InvalidArgument, call)
        else:
            self.accept(call)
            s.resources[("url", uri)] = mode

    @rule(pick=PICK, kind=st.sampled_from(sorted(TRIGGER_SPECS)))
    def trigger(self, pick: int, kind: str) -> None:
        s = self.pick(pick)
        args, spec = TRIGGER_SPECS[kind]
        call = self.ws.trigger_add(s.id, kind, list(args))
        if s.state == Z:
            self.refuse(IllegalTransition, call)
            return
        if any(t.kind == kind and t.spec == spec for t in s.triggers):  # the same trigger twice is a mistake
            self.refuse(InvalidArgument, call)
            return
        self.accept(call)
        s.triggers.append(Trig(kind, dict(spec), s.armed))

    @rule(pick=PICK, window=st.sampled_from([40, 400, 128_000]))
    def migrate(self, pick: int, window: int) -> None:
        s = self.pick(pick)
        call = self.ws.migrate(s.id, "builtin:echo", window=window)
        tokens = (self.count(s.system) if s.system else 0) + sum(i[3] for i in self.expected_context(s))
        if s.state == Z:
            self.refuse(IllegalTransition, call)
        elif tokens > window:
            self.refuse(ContextTooLarge, call)
        else:
            self.accept(call)

    @rule(call=st.sampled_from(["send", "fork", "merge", "compress", "cancel", "save", "memory"]))
    def unknown_session(self, call: str) -> None:
        ghost = max(self.sessions) + 1
        real = min(self.sessions)
        coro = {
            "send": lambda: self.ws.send(ghost, "x"),
            "fork": lambda: self.ws.fork(ghost),
            "merge": lambda: self.ws.merge(ghost, real),
            "compress": lambda: self.ws.compress(ghost),
            "cancel": lambda: self.ws.cancel(ghost),
            "save": lambda: self.ws.save(ghost, "p"),
            "memory": lambda: self.ws.memory_set(ghost, "k", 1),
        }[call]()
        self.refuse(SessionNotFound, coro)

    # ------------------------------------------------------------ invariants

    @invariant()
    def every_session_matches_the_model(self) -> None:
        if not self.sessions:
            return
        histories = {}
        for sid, s in self.sessions.items():
            d = self.run(self.ws.show(sid))
            hist = histories[sid] = self.run(self.ws.history(sid))
            assert [(m.seq, m.role, m.content, m.author, m.pinned, m.meta) for m in hist] == [
                (k + 1, m.role, m.content, m.author, m.pinned, m.meta) for k, m in enumerate(s.history)
            ], f"session {sid}: history differs from the model"
            assert all(m.tokens == self.count(m.content) for m in hist)
            ctx = norm(d.context)
            assert ctx == self.expected_context(s), f"session {sid}: active context differs from the model"
            assert sum(1 for i in ctx if i[6]) <= 1
            system_tokens = self.count(s.system) if s.system else 0
            assert d.info.context_tokens == system_tokens + sum(i[3] for i in ctx), f"session {sid}: token total"
            assert d.info.messages == len(ctx) and d.info.length == len(s.history)
            assert {k: canonical(v) for k, v in d.memory.items()} == s.memory, f"session {sid}: memory"
            assert d.info.state == s.state, f"session {sid}: state"
            if s.state == Z:
                assert d.info.reason == s.reason
            assert d.info.armed == s.armed
            assert d.info.parent == s.parent and d.info.fork_seq == s.fork_seq
            assert {(r.kind, r.uri): r.mode for r in d.resources} == s.resources
            assert [(t.kind, t.spec, t.armed, t.fired, t.pending) for t in d.info.triggers] == [
                (t.kind, t.spec, t.armed, t.fired, t.pending) for t in s.triggers], f"session {sid}: triggers"
        for sid, s in self.sessions.items():  # a fork reads its parent's rows up to the fork point
            if s.parent is not None:
                assert histories[sid][: s.fork_seq] == histories[s.parent][: s.fork_seq]

    @invariant()
    def one_journal_row_per_accepted_call(self) -> None:
        con = sqlite3.connect(self.path)
        try:
            calls = con.execute("SELECT count(*) FROM journal WHERE call != 'wake'").fetchone()[0]
            wakes = con.execute("SELECT count(*) FROM journal WHERE call = 'wake'").fetchone()[0]
        finally:
            con.close()
        assert (calls, wakes) == (self.calls, self.wakes)


ProcessionMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("PROCESSION_SM_EXAMPLES", "35")),
    stateful_step_count=int(os.environ.get("PROCESSION_SM_STEPS", "30")),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestProcession = ProcessionMachine.TestCase
# passing takes seconds; a failure is worth the minutes Hypothesis spends shrinking it
TestProcession.pytestmark = [pytest.mark.timeout(900)]
