"""The system-call table: the one name of every call, and what each face needs to know of it.

A ``Call`` is named once. Its value is the call's journal name, its key in the lifecycle
table (``states.TABLE``), its CLI verb and its monitor action id: nothing else spells a call
differently. Calls that have sub-operations (``memory set``, ``trigger add``) keep one name
and say the operation in their arguments, as the CLI does.

``USER_CALLS`` are the calls a person (or an agent) makes; every face must reach each of
them, which the test suite checks against this table. The engine's own calls move runs
along and are made by nobody else.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final


class Call(StrEnum):
    # user calls: a session's birth
    SPAWN = "spawn"
    LOAD = "load"
    FORK = "fork"
    # its context
    SEND = "send"
    MEMORY = "memory"
    COMPRESS = "compress"
    EXPAND = "expand"
    # its lifecycle
    ACTIVATE = "activate"
    SUSPEND = "suspend"
    RESUME = "resume"
    INTERRUPT = "interrupt"
    CANCEL = "cancel"
    # its settings
    SET = "set"
    ENV = "env"
    NICE = "nice"
    MIGRATE = "migrate"
    MOVE = "move"
    # lineage and files
    MERGE = "merge"
    SAVE = "save"
    # the agent CLIs' own sessions
    ADOPT = "adopt"
    SYNC = "sync"
    ATTACH = "attach"
    # bindings
    APPROVE = "approve"
    BIND = "bind"
    UNBIND = "unbind"
    TRIGGER = "trigger"
    # what an agent asks a person
    ALLOW = "allow"
    DENY = "deny"
    FORGET = "forget"
    # what it may spend
    LIMIT = "limit"
    # the engine's own
    START = "start"
    LAUNCH = "launch"
    EMIT = "emit"
    FINISH = "finish"
    RECOVER = "recover"
    ASK = "ask"
    LEASE = "lease"
    WAKE = "wake"
    NOTIFY = "notify"  # a notification the engine could not send (``engine.notify``)
    # an operator's: a host's engine is dead (its lease given up, so another may take it); a
    # person given a role of their own in a shared workspace's database, or taken off it
    HOST = "host"
    TEAM = "team"
    # the web face's devices: a pairing link made, a device paired by one, a device revoked
    PAIR = "pair"
    PAIRED = "paired"
    REVOKE = "revoke"


@dataclass(slots=True, frozen=True)
class CallInfo:
    """What a face needs to offer a call.

    ``summary`` is the one description every face shows (CLI help, the action menu, the
    palette). ``target``: ``"one"`` acts on one session, ``"many"`` on every session given
    (like ``kill``), ``"none"`` makes a new session from nothing. ``confirm``: the call ends
    or replaces something, so an interactive face asks first.
    """

    summary: str
    target: str = "one"
    confirm: bool = False


INFO: Final[dict[Call, CallInfo]] = {
    Call.SPAWN: CallInfo("create a session", target="none"),
    Call.LOAD: CallInfo("load a snapshot file, or a session's checkpoint, as a new session", target="none"),
    Call.FORK: CallInfo("fork a session (copy-on-write: no message is copied)"),
    Call.SEND: CallInfo("send a message into a session", target="many"),
    Call.MEMORY: CallInfo("working memory: set, get, delete or list keys"),
    Call.COMPRESS: CallInfo("fold older context behind a summary (reversible)", target="many"),
    Call.EXPAND: CallInfo("undo the newest compress exactly", target="many"),
    Call.ACTIVATE: CallInfo("queue a run (the engine starts it when a slot is free)", target="many"),
    Call.SUSPEND: CallInfo("suspend (a running step is stopped in place)", target="many"),
    Call.RESUME: CallInfo("resume a suspended session", target="many"),
    Call.INTERRUPT: CallInfo("stop the current step, keep its output", target="many"),
    Call.CANCEL: CallInfo("terminate (kills a running step, keeps the history)", target="many", confirm=True),
    Call.ENV: CallInfo("a session's environment: settings stored with it, names passed through at run time"),
    Call.SET: CallInfo("change a session's name, goal, system prompt, timeout or window"),
    Call.NICE: CallInfo("set the priority (higher runs first)", target="many"),
    Call.MIGRATE: CallInfo("move a session to another runner or window"),
    Call.MOVE: CallInfo("move a session to another host, with its folder and its agent's own session"),
    Call.MERGE: CallInfo("merge a session into another (three-way); the source ends merged", confirm=True),
    Call.SAVE: CallInfo("checkpoint a session in the store, or write a snapshot file"),
    Call.ADOPT: CallInfo("adopt an agent CLI's own sessions (Claude Code, Codex, opencode) as sessions", target="none"),
    Call.SYNC: CallInfo("append what an agent session's own transcript gained outside Procession", target="many"),
    Call.ATTACH: CallInfo("open the agent's own interactive CLI on a session, here; synced when it exits"),
    Call.APPROVE: CallInfo("arm a session's runner and triggers after reviewing them", target="many", confirm=True),
    Call.BIND: CallInfo("bind a resource: file, folder, db, mcp, tool, url"),
    Call.UNBIND: CallInfo("unbind a resource"),
    Call.TRIGGER: CallInfo("what wakes a session: add or remove a trigger"),
    Call.ALLOW: CallInfo("let what a waiting session's agent asked for run (--always: and its like, from now on)"),
    Call.DENY: CallInfo("refuse what a waiting session's agent asked for; the reason goes back to it"),
    Call.FORGET: CallInfo("remove a rule allow --always made"),
    Call.LIMIT: CallInfo("a budget, like an rlimit: tokens, cost, run time, runs per day, week, month or in total"),
}

#: The calls people and agents make, in the order faces list them.
USER_CALLS: Final[tuple[Call, ...]] = tuple(INFO)
#: The calls only the engine makes.
ENGINE_CALLS: Final[tuple[Call, ...]] = (Call.START, Call.LAUNCH, Call.EMIT, Call.FINISH, Call.RECOVER, Call.LEASE, Call.WAKE,
                                         Call.ASK, Call.NOTIFY)
#: The calls of the web face's devices (``procession web``, its pairing page): not a session's.
DEVICE_CALLS: Final[tuple[Call, ...]] = (Call.PAIR, Call.PAIRED, Call.REVOKE)
#: An operator's calls on a shared workspace (``procession host``, ``procession team``): not a session's.
OPERATOR_CALLS: Final[tuple[Call, ...]] = (Call.HOST, Call.TEAM)
