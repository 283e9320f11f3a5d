"""What a call did, in one line, and the notes it left: the words every face shows after a call.

``describe`` turns an outcome into the sentence the CLI prints and the monitor notifies.
``note`` renders a note, adding how to make the call it points to; each face says that in
its own terms (``procession approve 4`` in a shell, the key in the monitor) through the
``how`` function it passes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..model import agents
from ..model.requests import rule_name
from ..model.calls import Call
from ..model.outcomes import (
    Adopted,
    Adoption,
    Answered,
    Asked,
    Forgot,
    Limited,
    Attached,
    Synced,
    Approved,
    Bound,
    Compressed,
    Dead,
    Expanded,
    Teamed,
    Forked,
    Loaded,
    MemoryChanged,
    Merged,
    Migrated,
    Moved,
    Moving,
    Niced,
    Note,
    Outcome,
    Recounted,
    Saved,
    Sent,
    Spawned,
    TriggerAdded,
    TriggerRemoved,
    Unbound,
    Updated,
    EnvChanged,
)
from ..model.records import JournalEntry, MoveInfo, SessionInfo
from .lines import budget_line, resource_line, trigger_label
from .words import plural, printable, size

How = Callable[[Call, "int | None"], str]


def waitable(o: Outcome) -> str:
    """What a call that causes a run or a message says of waiting for it: ``2: ready; wait 2 --since 57``."""
    return f"{describe(o)}; wait {o.sid} --since {o.row}"


def describe(o: Outcome) -> str:
    """One line: what the call did."""
    match o:
        case Spawned():
            return f"spawned session {o.sid}"
        case Forked():
            return f"forked {o.parent} into {o.sid} at message {o.at}" + (
                printable(f", in {o.worktree}" + (f" on branch {o.branch}" if o.branch else "")) if o.worktree else "")
        case Loaded():
            return f"loaded {printable(o.source)} as session {o.sid} ({plural(o.messages, 'message')})"
        case Moved():
            return f"{o.sid}: {o.state}"
        case Moving(cancelled=True):
            return f"session {o.sid} stays on host {o.source}: its move to host {o.target} is taken back"
        case Moving():
            return (f"session {o.sid} moves from host {printable(o.source)} to host {printable(o.target)}, to work in"
                    f" {printable(o.folder)} there: {_MOVE_STAGES.get(o.stage, o.stage)}")
        case Adopted(already=True):
            return f"{o.cli} session {printable(o.agent)} is already session {o.sid}"
        case Adopted():
            return (f"adopted {o.cli} session {printable(o.agent)} as session {o.sid} ({plural(o.messages, 'message')}),"
                    f" working in {printable(o.cwd)}" + (" (held for approval)" if o.held else ""))
        case Synced(branched=True):
            return f"{o.sid}: not synced: its agent's transcript took another branch"
        case Synced():
            return f"{o.sid}: {plural(o.messages, 'message')} synced from its agent's transcript" if o.messages else (
                f"{o.sid}: in sync with its agent's transcript")
        case Attached():
            return f"{o.sid}: opening {o.cli} session {printable(o.agent)} in {printable(o.cwd)}"
        case Sent():
            if o.count == 1:
                return f"message {o.seq} sent to session {o.sid}"
            return f"appended {plural(o.count, 'message')} to session {o.sid}"
        case MemoryChanged():
            done = [f"{verb} {_some_keys(keys)}" for verb, keys in (("set", o.set), ("deleted", o.deleted)) if keys]
            return f"{o.sid}: {', '.join(done)}"
        case Compressed(masked=masked) if masked:
            f = o.fold
            return (f"{o.sid}: masked {plural(masked, 'tool output')} ({f.archived_tokens} tokens) behind one-line"
                    f" stubs ({f.summary_tokens} tokens); context {o.context_tokens}/{o.window}")
        case Compressed():
            f = o.fold
            return (f"{o.sid}: folded {plural(f.archived_count, 'item')} ({f.archived_tokens} tokens) into a summary"
                    f" of {f.summary_tokens} tokens; context {o.context_tokens}/{o.window}")
        case Expanded():
            return (f"{o.sid}: restored {plural(o.fold.archived_count, 'item')} ({o.fold.archived_tokens} tokens);"
                    f" context {o.context_tokens} tokens; {plural(o.in_force, 'compressed range')} left")
        case Updated(agent=str(agent)):
            return f"agent {printable(agent)}: changed {', '.join(o.changed)}"
        case Updated():
            return f"{o.sid}: changed {', '.join(o.changed)}"
        case Limited(cleared=True):
            return f"{'session ' + str(o.sid) if o.sid else 'agent ' + str(o.agent)}: limit removed" + _resumed(o)
        case Limited():
            return "\n".join([budget_line(b) for b in o.budgets] or ["no limits"]) + _resumed(o)
        case Answered():
            return (f"request {o.request} {'allowed' if o.answer == 'allow' else 'denied'}"
                    + (f", and {plural(len(o.also), 'other')} like it" if o.also else "")
                    + (f"; rule {o.rule} allows its like from now on" if o.rule else "")
                    + f"; session {o.sid} is {o.state}")
        case Asked():
            return f"request {o.request} of session {o.sid}: " + (f"{o.answer} by {o.by}" if o.answer else "waiting")
        case Forgot():
            return f"rule {o.rule} of session {o.sid} removed: {printable(rule_name(o.tool, o.subject))} asks again"
        case Recounted():
            return f"{o.sid}: context {o.context_tokens}/{o.window} tokens, by {printable(o.tokenizer)}"
        case Niced():
            return f"session {o.sid} priority {o.priority}"
        case EnvChanged():
            shown = [f"{printable(k)}={printable(v)}" for k, v in sorted(o.env.items())]
            shown += [f"{printable(k)} (passed)" for k in o.passed]
            taken = f"; and of the engine's own, only {' '.join(o.taken)}" if o.taken else ""
            return f"{o.sid}: environment {' '.join(shown) if shown else 'empty'}{taken}"
        case Migrated():
            return (f"session {o.sid} now runs on {printable(o.runner)} (window {o.window},"
                    f" context {o.context_tokens} tokens{', compressed to fit' if o.fold else ''})")
        case Merged():
            return (f"merged {o.source} into {o.sid}: {plural(o.messages, 'message')} joined,"
                    f" {plural(len(o.memory_changed), 'memory key')} changed,"
                    f" {plural(o.resources_added, 'resource')} added"
                    + (f", {plural(len(o.files), 'file')} changed" if o.files else ""))
        case Saved() if o.checkpoint is not None:
            return f"checkpoint {printable(o.checkpoint.name)!r} of session {o.sid} at message {o.checkpoint.seq}"
        case Saved():
            return f"wrote {printable(o.file or '')} ({plural(o.messages, 'message')}, {size(o.bytes)})"
        case Approved():
            armed = ", ".join(trigger_label(t) for t in o.triggers) or "no trigger"
            return f"session {o.sid} approved: runner {printable(o.runner)} and {armed} armed"
        case Bound():
            return f"{o.sid}: bound {resource_line(o.resource)}"
        case Unbound():
            return f"{o.sid}: unbound {resource_line(o.resource)}"
        case TriggerAdded():
            return f"{o.sid}: trigger {o.trigger.id} added: {trigger_label(o.trigger)}"
        case TriggerRemoved():
            return f"{o.sid}: trigger {o.trigger.id} removed: {trigger_label(o.trigger)}"
        case Teamed(added=True):
            return (f"{o.name} may use the workspace{' (read only)' if o.read_only else ''}: give the role a password"
                    f" (ALTER ROLE {o.name} PASSWORD '…') or a certificate, and they connect as"
                    f" postgresql://{o.name}@…; the journal names them")
        case Teamed():
            return f"{o.name} may no longer use the workspace (the role itself is left in the database)"
        case Dead():
            return (f"host {printable(o.host)}'s engine (pid {o.pid} on machine {printable(o.machine)}, not heard for"
                    f" {o.silent:.0f}s) is declared dead: its lease is given up, an engine may take the host over,"
                    " and it changes nothing should it come back")
    return f"{o.sid}: done"


#: What a move waits for, at each stage.
_MOVE_STAGES = {"packing": "its old host's engine packs it", "placing": "its new host's engine places it",
                "clearing": "it is there; its old host's engine removes what it left", "done": "done",
                "failed": "failed", "cancelled": "taken back"}


def engine_line(e: dict[str, Any]) -> str:
    """One engine of ``activity()["engines"]``: its host, its process and machine, whether it is heard."""
    return (f"host {e['host']}: engine pid {e['pid']} on machine {e['machine']}, {plural(e['slots'], 'slot')}, "
            + ("heard" if e["alive"] else f"not heard (if it is dead: procession host {e['host']} --dead)"))


def move_failed(m: MoveInfo) -> str:
    return f"session {m.sid} did not move to host {m.target}, and stays on host {m.source}: {m.problem}"


def moved(m: MoveInfo) -> str:
    """How a session's last move went: a line, and what the engines said of it."""
    if m.stage == "done":
        head = f"session {m.sid} moved from host {m.source} to host {m.target}; it works in {m.folder} there"
    elif m.stage == "failed":
        head = move_failed(m)
    elif m.stage == "cancelled":
        head = f"session {m.sid} stays on host {m.source}: its move to host {m.target} was taken back"
    else:
        head = f"session {m.sid} is still moving to host {m.target}: {_MOVE_STAGES.get(m.stage, m.stage)}"
    return printable("\n".join([head, *(f"  {line}" for line in m.said)]))


def adoption(a: Adoption, *, brief: bool = False) -> str:
    """What ``adopt`` did: a line per session made or found, one per transcript left out, a
    total (``brief``: the total alone, when there is more than one)."""
    lines = [describe(r) for r in a.results]
    lines += [f"left out {printable(path)}: {why}" for path, why in a.left]
    if brief and len(lines) > 1:
        lines = []
    if not a.results and not a.left and a.looked:
        return f"nothing to adopt in {printable(a.looked)} (where {agents.CLIS[a.cli].title} keeps its sessions here)"
    if len(a.results) + len(a.left) != 1:
        held = len(a.results) - a.made
        lines.append(f"{plural(a.made, 'session')} adopted" + (f", {held} already held" if held else "")
                     + (f", {len(a.left)} left out" if a.left else ""))
    return "\n".join(lines)


def restarted(entry: JournalEntry, name: str) -> str:
    """``session 3 (nightly) runs again: its run 12 was lost (its engine stopped); restart on-failure``;
    or, for a notification the engine could not send, the problem as its log said it."""
    out = entry.outcome if isinstance(entry.outcome, dict) else {}
    if entry.call == Call.NOTIFY:
        return printable(str(out.get("problem", "a notification could not be sent")), lines=False)
    why = {"lost": "was lost (its engine stopped: a crash or a restart)", "failed": "failed",
           "timeout": "ran out of time", "interrupted": "was interrupted as its engine stopped"}.get(
        str(out.get("outcome")), "did not finish")
    return (f"session {entry.session} ({printable(name)}) runs again: its run {out.get('run', '?')} {why};"
            f" restart {printable(str(out.get('policy', '?')))}")


def failing(s: SessionInfo) -> str:
    """Why the engine suspended a session by itself."""
    return (f"session {s.id} ({printable(s.name)}) is suspended: its last {plural(s.failures, 'run')} failed"
            f" ({s.last_outcome}); see its runs, then resume it")


def _resumed(o: Limited) -> str:
    return f"; resumed {', '.join(map(str, o.resumed))} (under budget again)" if o.resumed else ""


def asking(s: SessionInfo, how: str) -> str:
    """A session that has begun to wait for a person."""
    return (f"session {s.id} ({printable(s.name)}) waits for you: its agent asks to do what it may not unasked"
            f" — W lists what waits; allow with {how}")


def note(n: Note, how: How) -> str:
    """A note, with how to make the call it points to (in the face's own terms)."""
    text = printable(n.text)
    if n.call is not None:
        hint = how(n.call, n.sid)
        if hint:
            text += f" ({hint})"
    return text


def _some_keys(keys: tuple[str, ...], shown: int = 5) -> str:
    """Memory keys a call changed: a few by name, the rest counted (a load may set thousands)."""
    named = ", ".join(printable(k) for k in keys[:shown])
    return named if len(keys) <= shown else f"{len(keys)} keys ({named} and {len(keys) - shown} more)"
