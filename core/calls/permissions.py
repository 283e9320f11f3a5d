"""What a session's agent asks a person, and the answers: ``ask`` (made for a run that needs
a person), ``allow``, ``deny`` and ``forget``; ``pending`` and ``rules`` read them.

A run that asks blocks; its session is ``waiting`` (W) until every request of it is answered.
Each request is answered once, in one transaction: two faces answering at once, one wins and
the other is told it was answered. A request outlives its run only when the engine stopped
under it (its shutdown, or its death): the session stays waiting, and the answer, when it
comes, is carried into a new run, queued at once, which the agent is told of in a message (the
same call, asked again, gets the same answer without asking). When its run ends any other way
(interrupted, cancelled, failed), the request is withdrawn.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from ..model import bounds, limits, requests
from ..model.calls import Call
from ..model.errors import Answered as AlreadyAnswered
from ..model.errors import NotFound, ProcessionError
from ..model.outcomes import Answered, Asked, Forgot
from ..model.records import Request, Rule
from ..model.states import State
from ..store import Row, Tx, rows
from ..store import requests as asks
from . import waking
from .agents import WAIT_FORCED, WAIT_POLL_S
from .base import Calls
from .reads import live_holder
from .syscall import Act, syscall, transition

#: The sender of the message that tells an agent an answer its ended run waited for.
SENDER = "procession"


class PermissionCalls(Calls):
    @syscall(Call.ASK)
    async def ask(self, act: Act, sid: int, tool: str, input: Any, *, key: str | None = None) -> Asked:
        """What the agent of ``sid``'s running step asks to do: ``tool`` with ``input``. Answered
        at once when the session's permissions allow anything, a rule of it matches, or a run
        that ended waiting for the same call had it answered; else the session waits (W)."""
        tool = limits.name(tool, "tool name")
        limits.json_shape(input, "the tool's input")  # an agent's words: nested a million deep is refused
        subject = requests.subject(tool, input)
        text = json.dumps(input, ensure_ascii=False, sort_keys=True)
        run = await asks.asking_run(act.tx, sid)
        answer: tuple[str, str | None, str] | None = None
        if act.row["permissions"] == bounds.ALL:
            answer = (requests.ALLOW, None, "its permissions (all)")
        else:
            rules = await _rules(act.tx, sid, tool)
            used = requests.cover(tool, input, rules)
            if used is not None:
                answer = (requests.ALLOW, None, _by_rules([rules[u] for u in used]))
            else:
                carried = await asks.take_carried(act.tx, sid, tool, text)
                if carried is not None:
                    answer = (carried["answer"], carried["why"], f"request {carried['id']}")
        given, why, by = answer if answer else (None, None, None)
        request = await asks.insert_request(act.tx, sid, run, tool, text, subject, key, given, why, by)
        if answer is None:
            await rows.update_session(act.tx, sid, state=act.target.value)
            return Asked(sid, request, None)
        return Asked(sid, request, answer[0], answer[1], answer[2])

    @syscall(Call.ALLOW, session="result", check=None)
    async def allow(self, act: Act, request: int, *, always: bool = False) -> Answered:
        """Let the call ``request`` asked for run; ``always``: and every call of its tool on its
        subject (``requests.subject``: a shell command exactly, or a program known to run no
        other with any arguments), for its session from now on (a rule, ``forget`` removes it),
        answering the session's other open requests its rules now allow too."""
        asked = await _open(act, request)
        rule: int | None = None
        also: list[int] = []
        if always:
            tool, input = asked["tool"], json.loads(asked["input"])
            subject = requests.subject(tool, input)  # as this Procession reads it (the request may be older)
            rule = await asks.put_rule(act.tx, asked["session_id"], tool, subject, request)
            rules = await _rules(act.tx, asked["session_id"], tool)
            also = [r["id"] for r in await asks.open_requests(act.tx, asked["session_id"], tool, request)
                    if requests.cover(tool, json.loads(r["input"]), rules) is not None]
        state = await _answer(act, asked, [request, *also], requests.ALLOW, None, self.store.count_tokens)
        return Answered(asked["session_id"], request, requests.ALLOW, state, rule, tuple(also))

    @syscall(Call.DENY, session="result", check=None)
    async def deny(self, act: Act, request: int, *, why: str = "") -> Answered:
        """Refuse the call ``request`` asked for; ``why`` goes back to the agent as the tool's
        refusal (it goes on with its turn, knowing)."""
        asked = await _open(act, request)
        why = limits.text(why, "reason")[:requests.WHY_MAX] or "the user denied it"
        state = await _answer(act, asked, [request], requests.DENY, why, self.store.count_tokens)
        return Answered(asked["session_id"], request, requests.DENY, state)

    @syscall(Call.ASK, session="result", check=None)
    async def unask(self, act: Act, request: int) -> Asked:
        """Withdraw a request whose asker stopped waiting; its session runs on if nothing else
        of it waits (an answer given meanwhile stays)."""
        asked = await asks.request_row(act.tx, request)
        if asked is None:
            raise NotFound(f"no request {request}")
        sid = asked["session_id"]
        if asked["answer"] is None:
            await asks.asker_left(act.tx, request, requests.WITHDRAWN)
            row = await rows.session(act.tx, sid)
            if not await asks.asking(act.tx, sid) and row["state"] == State.WAITING:
                await rows.update_session(act.tx, sid, state=State.RUNNING.value)
        return Asked(sid, request, requests.WITHDRAWN)

    @syscall(Call.FORGET, session="result", check=None)
    async def forget(self, act: Act, rule: int) -> Forgot:
        """Remove the rule ``rule``: its calls ask again."""
        found = await asks.rule(act.tx, rule)
        if found is None:
            raise NotFound(f"no rule {rule} (procession rules lists them)")
        act.row = await rows.session(act.tx, found["session_id"])
        transition(act.row, Call.FORGET)
        await asks.drop_rule(act.tx, rule)
        await act.tx.touch(found["session_id"])
        return Forgot(found["session_id"], rule, found["tool"], found["subject"])

    # ------------------------------------------------------------------ reads

    async def pending(self, sids: list[int] | None = None) -> list[Request]:
        """The requests waiting for an answer, oldest first (of ``sids`` only, when given)."""
        async with self.store.snapshot() as tx:
            found = await asks.waiting(tx, sids)
        return [_request(r) for r in found]

    async def request(self, request: int) -> Request:
        """One request, answered or not (``NotFound``)."""
        async with self.store.snapshot() as tx:
            found = await asks.request(tx, request)
        if found is None:
            raise NotFound(f"no request {request} (procession pending lists those waiting)")
        return _request(found)

    async def decide(self, sid: int, tool: str, input: Any, *, key: str | None = None,
                     keep: Callable[[], bool] = lambda: False) -> tuple[bool, str]:
        """``ask``, then wait for the answer: whether the call may run, and else why not (the
        text the agent is given). A refused ``ask`` (the session was stopped meanwhile) and a
        withdrawn request are a no that says so. Cancelled while it waits (its asker hung up),
        the request is withdrawn, unless ``keep()`` (the engine is stopping under the run: the
        request outlives it)."""
        try:
            asked = await self.ask(sid, tool, input, key=key)
            answer, why = asked.answer, asked.why
            if answer is None:
                if self.told is not None:
                    self.told()
                try:
                    found = await self.answer(asked.request)
                except asyncio.CancelledError:  # the asker hung up (its CLI, its relay): nothing waits
                    if not keep():
                        await asyncio.shield(self.unask(asked.request))
                    raise
                answer, why = found.answer, found.why
        except ProcessionError as exc:
            return False, f"Procession: {exc}"
        if answer == requests.ALLOW:
            return True, ""
        if answer == requests.WITHDRAWN:
            return False, "Procession: the request was withdrawn (the run is stopping)"
        return False, why or "the user denied it"

    async def answer(self, request: int) -> Request:
        """The request once it is answered (or withdrawn), however long that takes: a person may
        be away. Holds no lock while it waits; looks when the workspace changed."""
        version, looks = None, 0
        while True:
            now_version = await self.store.data_version()
            if now_version != version or looks % WAIT_FORCED == 0:
                version = now_version
                found = await self.request(request)
                if found.answer is not None:
                    return found
            looks += 1
            await asyncio.sleep(WAIT_POLL_S)

    async def rules(self, sid: int | None = None) -> list[Rule]:
        """The rules ``allow --always`` made (of session ``sid``, when given), each with what it
        matches now (``requests.reading``)."""
        async with self.store.snapshot() as tx:
            if sid is not None:
                await rows.session(tx, sid)
            found = await asks.rules(tx, sid)
        out = []
        for r in found:
            reads = _reading(r)
            out.append(Rule(r["id"], r["session_id"], r["tool"], r["subject"], r["made"], r["request_id"], reads,
                            requests.matches(reads)))
        return out


def _reading(r: Row) -> str | None:
    return requests.reading(r["tool"], r["subject"], json.loads(r["made_from"]) if r["made_from"] else None)


async def _rules(tx: Tx, sid: int, tool: str) -> dict[str, int]:
    """Session ``sid``'s rules of ``tool``, by what each matches now (one that matches nothing left out)."""
    found: dict[str, int] = {}
    for r in await asks.tool_rules(tx, sid, tool):
        reads = _reading(r)
        if reads is not None:
            found.setdefault(reads, r["id"])
    return found


def _by_rules(ids: list[int]) -> str:
    """``rule 3``, ``rules 3, 5``: what answered a call."""
    return f"rule {ids[0]}" if len(ids) == 1 else f"rules {', '.join(map(str, ids))}"


def _request(r: Row) -> Request:
    return Request(r["id"], r["session_id"], r["session_name"], r["agent_name"], r["run_id"], r["tool"],
                   json.loads(r["input"]), r["subject"], r["asked"], r["answer"], r["why"], r["answered"],
                   r["answered_by"])


async def _open(act: Act, request: int) -> Row:
    """The request, still open, and its session checked for an answer (``act.row``)."""
    asked = await asks.request_row(act.tx, request)
    if asked is None:
        raise NotFound(f"no request {request} (procession pending lists those waiting)")
    if asked["answer"] is not None:
        how = {requests.ALLOW: "allowed", requests.DENY: "denied"}.get(asked["answer"], asked["answer"])
        by = f" by {asked['answered_by']}" if asked["answered_by"] else ""
        raise AlreadyAnswered(f"request {request} was answered already: {how}{by}")
    act.row = await rows.session(act.tx, asked["session_id"])
    act.target = transition(act.row, act.call)
    return asked


async def _answer(act: Act, asked: Row, ids: list[int], answer: str, why: str | None,
                  count: Callable[[str], int]) -> State:
    """Answer ``ids`` (requests of one session); the session runs on once nothing of it waits.
    A request whose run is gone has its answer carried into a new run, queued now."""
    tx, sid = act.tx, asked["session_id"]
    run_live = asked["run_id"] is not None and await _listening(tx, sid, asked["run_id"])
    await asks.answer(tx, ids, answer, why, act.actor, carried=not run_live)
    if await asks.asking(tx, sid):
        await tx.touch(sid)
        return State.WAITING
    if run_live:
        await rows.update_session(tx, sid, state=State.RUNNING.value)
        return State.RUNNING
    await _tell(tx, act, asked, answer, why, count)
    await waking.queue(tx, await rows.session(tx, sid), [{"kind": "answer", "request": asked["id"]}])
    return State.READY


async def _listening(tx: Tx, sid: int, run: int) -> bool:
    """Whether run ``run`` is there to hear an answer: open, and its engine alive (an engine
    killed under it leaves it open until the next one records it lost)."""
    if not await rows.live_run(tx, sid, run):
        return False
    holder = await live_holder(tx, await asks.session_host(tx, sid))
    return holder is not None and holder.token == await asks.run_engine(tx, run)


async def _tell(tx: Tx, act: Act, asked: Row, answer: str, why: str | None,
                count: Callable[[str], int]) -> None:
    """The message that tells an agent what was answered while no run of it was there to hear.
    Its CLI may have told its model the call was rejected as the run stopped (Claude Code writes
    so for a tool use its run did not finish, even when killed): the message says that was no
    person's answer, so that the one its model takes is the person's."""
    call = requests.summary(asked["tool"], json.loads(asked["input"]))
    stopped = (f"Your run stopped while it waited for permission to use {asked['tool']} ({call}): if it said the"
               " call was rejected, that was the run stopping, not a person's answer.")
    if answer == requests.ALLOW:
        text = f"{stopped} A person has now allowed it: make that call again."
    else:
        text = f"{stopped} A person has now denied it: {why}"
    await rows.append(tx, act.row, [("user", text, SENDER, False, {"request": asked["id"]})], count)
