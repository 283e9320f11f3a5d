"""Calls on the agent CLIs' own sessions: adopting them as sessions, following them as they
grow outside Procession, and holding one while its CLI is open on it (``attach``).

An agent session (one a ``claude:``, ``codex:`` or ``opencode:`` runner ran, or one adopted)
keeps a reference to the CLI's own session (``agent_ref``) and, in it, the position its
transcript has been read to. What the CLI adds outside Procession (the user kept using it,
or attached) is appended by ``sync`` exactly once: the read starts at that position, and the
position moves in the same transaction as the messages. A run of the session moves it too
(with each message it stores that names its transcript record, and past all it wrote when it
ends), so what a run stored is never read again; nor is the prompt of a run whose engine died
(``native.PROMPTED``), nor what such a run stored when its CLI's messages name no record.

Files are read before the call's transaction opens, never while the workspace is locked; the
call then checks that the position it read from is still the session's.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from ..model import agent_homes, agents, bounds, limits, runner_spec, transcripts
from ..model.calls import Call
from ..model.errors import InvalidArgument, ProcessionError
from ..model.outcomes import Adopted, Adoption, Attached, Moved, Synced
from ..model.states import Reason, State
from ..model.toolcalls import one_line
from ..model.transcripts import Position, Said, Transcript
from ..store import Tx, messages, rows
from ..store import agents as agent_rows
from .lifecycle import LifecycleCalls
from . import outside
from .native import PROMPTED, agent_ref, carry_over, cli_environment, located, user_environment
from .syscall import Act, all_or_none, syscall

#: A session adopted with no model named in its transcript, or no window, gets these.
DEFAULT_WINDOW: Final = 128_000
TITLE_MAX: Final = 60
#: How often a sync reads again when the session moved on while its transcript was read.
SYNC_TRIES: Final = 3

Progress = Callable[[int, int], None]


def _kept_changing(sids: list[int]) -> InvalidArgument:
    which = ", ".join(map(str, sids))
    return InvalidArgument(f"session{'s' if len(sids) > 1 else ''} {which} kept changing while"
                           f" {'their transcripts were' if len(sids) > 1 else 'its transcript was'} read: sync again")


class _MovedOn(Exception):
    """The session's read position moved while its transcript was read (nothing is written;
    not a refusal: the transcript is read again)."""


async def _stored(tx: Tx, sid: int, run: int, said: Sequence[Said]) -> int:
    """How many of the messages ``said`` after run ``run``'s prompt the run stored itself. A
    CLI whose events name no record of its transcript (Codex, opencode) leaves the position
    before the prompt of a run its engine lost: the transcript then holds what the run stored
    first, in the order stored, and a sync leaves that out (the first that differs, and all
    after it, are brought)."""
    same = 0
    for (role, content), message in zip(await messages.stored_by_run(tx, sid, run), said):
        if (role, content) != (message.role, message.content):
            break
        same += 1
    return same


def _title(read: Transcript) -> str:
    return one_line(read.title or "", TITLE_MAX) or f"{read.cli} {read.id[:8]}"


def unasked(folder: str) -> str | None:
    """Why a session may not work in ``folder`` unless a person approves it (a system folder,
    the home folder or one holding it, a folder of keys), or None."""
    real, home = os.path.realpath(folder), os.path.realpath(os.path.expanduser("~"))
    why = bounds.too_wide(real, home, write=True)
    if why:
        return why
    keys = bounds.secret(real, home)
    return f"which holds your keys or logins ({keys})" if keys else None


class AdoptCalls(LifecycleCalls):
    async def holders(self, cli: str) -> dict[str, int]:
        """Every session id of ``cli`` a session holds, or held before a migrate -> the first
        session holding it."""
        async with self.store.snapshot() as tx:
            return await agent_rows.holders(tx, cli)

    async def agent_refs(self) -> dict[int, dict[str, Any]]:
        """The agent references of the sessions not ended and not running a step here (what
        the monitor looks for outside Procession)."""
        async with self.store.snapshot() as tx:
            found = await agent_rows.agent_refs(tx)
        return {sid: ref for sid, text in found if not (ref := json.loads(text)).get("fork")}

    async def adopt(self, cli: str, ident: str | None = None, *, every: bool = False, since: float | None = None,
                    agent: str | None = None, env: Mapping[str, str] | None = None,
                    progress: Progress | None = None) -> Adoption:
        """Make sessions of the CLI's own: the one ``ident`` names (its id, an id prefix, or
        its file), or ``every`` one it keeps (``since``: changed since then). Each is one call,
        one transaction; one already held by a session is said, not made again. With ``every``,
        a transcript that cannot be read, or holds no conversation, is left out and said."""
        fmt = transcripts.format_of(cli)
        environ = dict(os.environ if env is None else env)
        if ident is not None and (every or since is not None):
            raise InvalidArgument("adopt takes one session (ID or PATH), or --all / --since, not both")
        if ident is not None:
            found = [fmt.find(environ, ident)]
        elif every or since is not None:
            found = [f for f in fmt.discover(environ) if since is None or f.updated >= since]
        else:
            title = agents.CLIS[cli].title
            raise InvalidArgument(f"name the {title} session to adopt (its id or its file), or give --all or --since")
        held = await self.holders(cli)
        results: list[Adopted] = []
        left: list[tuple[str, str]] = []
        for n, one in enumerate(found, 1):
            if one.id in held:
                results.append(Adopted(held[one.id], cli, one.id, one.path, 0, already=True))
            else:
                try:
                    read = await asyncio.to_thread(fmt.read, one)
                    if not read.messages and ident is None:
                        raise InvalidArgument("it holds no conversation")
                    results.append(await self.adopt_read(read, agent=agent or cli))
                except InvalidArgument as refused:
                    if ident is not None:
                        raise
                    left.append((one.path, str(refused)))
            if progress:
                progress(n, len(found))
        return Adoption(cli, tuple(results), tuple(left), looked="" if ident is not None else fmt.kept(environ))

    @syscall(Call.ADOPT, session="result", check=None)
    async def adopt_read(self, act: Act, read: Transcript, *, agent: str) -> Adopted:
        """One transcript, read, as a new sleeping session of ``agent``: its messages with their
        own times, the CLI's reference and read position, its model, context and token use."""
        held = await agent_rows.holder(act.tx, read.cli, read.id)
        if held is not None:
            return Adopted(held, read.cli, read.id, read.path, 0, already=True)
        if not read.cwd or not os.path.isabs(read.cwd):
            raise InvalidArgument(f"{read.path} does not say which folder the session ran in")
        cli = agents.CLIS[read.cli]
        # over ACP the agent goes on with the model its settings choose (Qwen Code takes no other by name)
        runner = cli.runner(read.model if cli.headless else "")
        try:
            runner_spec.parse(runner)
        except InvalidArgument:  # a model name the runner would not take (spaces)
            runner = cli.runner()
        window = ((read.context[1] if read.context and read.context[1] else None)
                  or agents.CLIS[read.cli].window(read.model) or DEFAULT_WINDOW)
        why = unasked(read.cwd)  # a transcript says where it ran: a file anything may have written
        sid = await rows.insert_session(
            act.tx, 0, agent_id=await rows.agent_id(act.tx, limits.name(agent, "agent name")),
            name=_title(read), runner=runner, window=limits.window(window), cwd=read.cwd,
            agent_ref=json.dumps({**read.ref(), "position": read.position.as_json(), "adopted": act.now}),
            spawned_by=self.acting, armed=0 if why else 1, **({"created": read.started} if read.started else {}),
        )
        await _take(act.tx, sid, read, self.store.count_tokens)
        if why:
            act.note(f"its transcript says it ran in {read.cwd}, {why}: it waits for your approval before it runs",
                     Call.APPROVE, sid)
        if not os.path.isdir(read.cwd):
            act.note(f"its folder {read.cwd} is not here: runs need it (migrate the session, or load it with --map)")
        if read.problems:
            act.note(f"{len(read.problems)} records of its transcript were left out: {read.problems[0]}")
        return Adopted(sid, read.cli, read.id, read.path, len(read.messages), cwd=read.cwd, held=bool(why))

    async def sync(self, sid: int, *, quiet: bool = False) -> Synced:
        """Append what the session's agent transcript gained since it was last read. ``quiet``
        (the engine's follower): no call is made, and nothing journaled, when nothing changed."""
        if not quiet:
            return (await self.sync_all([sid]))[0]
        for _ in range(SYNC_TRIES):
            position, read = await self._read(sid)
            if not read.messages and read.position == position and not read.branched:
                return Synced(sid, 0)
            try:
                return await self._synced(sid, read, position)
            except _MovedOn:
                continue
        raise _kept_changing([sid])

    async def sync_all(self, sids: Sequence[int]) -> list[Synced]:
        """``sync`` on every session of ``sids``, all or none (as ``each``): every transcript is
        read first, then what each gained is appended in one transaction."""
        sids = list(dict.fromkeys(sids))
        for _ in range(SYNC_TRIES):
            reads, refused = {}, []
            for sid in sids:
                try:
                    reads[sid] = await self._read(sid)
                except ProcessionError as exc:
                    refused.append(exc)
            calls = [functools.partial(self._synced, sid, read, position) for sid, (position, read) in reads.items()]
            try:
                return await all_or_none(self.store, calls, refused, single=len(sids) == 1)
            except _MovedOn:
                continue
        raise _kept_changing(sids)

    async def _read(self, sid: int) -> tuple[Position, Transcript]:
        """Where the session's transcript was read to, and what it holds from there."""
        async with self.store.snapshot() as tx:
            row = await rows.session(tx, sid)
        ref = agent_ref(row)
        if ref is None:
            raise InvalidArgument(f"session {sid} has no agent session of its own to sync")
        if ref.get("fork"):
            raise InvalidArgument(f"session {sid}'s own agent session is made by its first run (it forks"
                                  f" {ref['id']}): there is nothing of its own to sync yet")
        if not transcripts.read_on(ref):
            title = agents.CLIS[ref["cli"]].title if ref["cli"] in agents.CLIS else ref["cli"]
            raise InvalidArgument(f"session {sid} runs {title} over ACP: its runs store what it says, and its"
                                  " own files are not read on")
        position = Position.of(ref.get("position"))
        found = await asyncio.to_thread(located, ref, cli_environment(row, self.path))
        return position, await asyncio.to_thread(transcripts.format_of(ref["cli"]).read, found, position)

    @syscall(Call.SYNC)
    async def _synced(self, act: Act, sid: int, read: Transcript, position: Position) -> Synced:
        ref = agent_ref(act.row)
        if ref is None or ref.get("id") != read.id or Position.of(ref.get("position")) != position:
            raise _MovedOn  # meanwhile a run ended, or another sync took it: read again
        if read.branched:  # the session keeps its conversation, as a session of the CLI's own
            title = agents.CLIS[read.cli].title
            spec = runner_spec.parse(act.row["runner"])
            moved = await carry_over(act.tx, act.row, runner_spec.RunnerSpec(
                read.cli, spec.target if spec.cli == read.cli else ""))
            if moved is not None:
                keep = {k: ref[k] for k in ("adopted", "was") if k in ref}
                await rows.update_session(act.tx, sid, agent_ref=json.dumps({**moved, **keep}),
                                          agent_seen=act.row["length"])
            act.note(f"its {title} session was rewound or edited there and no longer continues the conversation"
                     " this session holds: nothing was appended"
                     + (f"; the session keeps its own, now as {title} session {moved['id']}, which its next run"
                        " resumes; adopt the transcript again to have the new branch as a session of its own"
                        if moved is not None else ""))
            return Synced(sid, 0, branched=True)
        if ref.get(PROMPTED) is not None and read.messages:  # a run's prompt first: in the history already
            run = ref.pop(PROMPTED)
            if read.messages[0].role == "user":
                read.messages = read.messages[1:]
            read.messages = read.messages[await _stored(act.tx, sid, run, read.messages):]
        ref["position"] = read.position.as_json()
        await rows.update_session(act.tx, sid, agent_ref=json.dumps(ref))
        await _take(act.tx, sid, read, self.store.count_tokens)
        if read.problems:
            act.note(f"{len(read.problems)} records of its transcript were left out: {read.problems[0]}")
        return Synced(sid, len(read.messages))

    @syscall(Call.ATTACH)
    async def attach(self, act: Act, sid: int, *, accept: bool = False) -> Attached:
        """Hold the session for its agent's own interactive CLI: suspended (reason
        ``attached``) so that no run starts while the person types; ``detach`` gives it back.
        Its CLI runs with the person's own reach, on the session's state folder, which its
        confined runs write: settings they changed there (a hook, an instruction) would run
        with that reach, so it is refused until the person has read them and ``accept``s them
        (the settings as they are are then the session's own, until its runs change them again)."""
        ref = agent_ref(act.row)
        if ref is None:
            spec = runner_spec.parse(act.row["runner"])
            if not spec.agent:
                raise InvalidArgument(f"session {sid} runs on {act.row['runner']}, not an agent CLI: there is no"
                                      " agent's own CLI to open")
            raise InvalidArgument(f"session {sid} has no {agents.title(spec.cli)} session of its own yet:"
                                  " activate it once first")
        if ref.get("fork"):
            raise InvalidArgument(f"session {sid}'s own {agents.CLIS[ref['cli']].title} session is made by its"
                                  " first run (a fork): activate it once first")
        if not transcripts.read_on(ref):  # what the person did there would never come back into the session
            raise InvalidArgument(f"session {sid} runs {agents.CLIS[ref['cli']].title} over ACP, whose own files"
                                  " Procession does not read on: attach would lose what you do there")
        cwd = ref.get("cwd") or act.row["cwd"]
        user = user_environment(act.row, passed=True)
        agents.locate(ref["cli"], user)  # not installed here: refused before anything changes
        # its CLI opens on the session's own state folder, holding its agent session (copied in
        # if it lives elsewhere: adopted from the user's own, say), as a run would have it
        env = agent_homes.seeded(ref["cli"], user, act.tx.store.path, act.row, cwd)
        home = agent_homes.folder(act.tx.store.path, str(act.row["uuid"]), ref["cli"])
        changed = agent_homes.changed(ref["cli"], home)
        if changed and not accept:
            raise InvalidArgument(f"session {sid}'s runs changed its {agents.CLIS[ref['cli']].title} settings"
                                  f" ({', '.join(changed)} in {home}), and attach runs its CLI with your own reach:"
                                  f" read them, then attach {sid} --accept")
        if changed:
            agent_homes.accept(ref["cli"], home)
        placed = agent_homes.brought(ref, env, cwd)
        if placed is not None:
            await rows.update_session(act.tx, sid, agent_ref=json.dumps({**ref, "transcript": placed["transcript"]}))
        held = act.row["state"] != State.SUSPENDED
        if held:
            await rows.update_session(act.tx, sid, state=State.SUSPENDED.value, resume_to=act.row["state"],
                                      reason=Reason.ATTACHED.value)
        return Attached(sid, ref["cli"], ref["id"], cwd, held, env, act.row["length"])

    async def resume(self, sid: int) -> Moved:
        """``resume``, but of a session ``attach`` holds: refused while its CLI is open (the
        person there types into it: a run started meanwhile would write one transcript from
        two places). Once that CLI exits, ``detach`` gives the session back; should ``detach``
        never come (its terminal closed), this does, after syncing what was typed there."""
        await self.before(Call.RESUME, sid)
        return await super().resume(sid)

    async def before(self, call: Call, sid: int, **options: Any) -> None:
        """Before a ``resume``: an attached session's CLI (see ``resume``)."""
        if call is not Call.RESUME:
            return await super().before(call, sid, **options)
        async with self.store.snapshot() as tx:
            row = await rows.session(tx, sid)
        ref = agent_ref(row) if row["reason"] == Reason.ATTACHED else None
        if ref is not None:
            if live := await asyncio.to_thread(outside.Looker().look, {sid: ref}):
                raise InvalidArgument(f"session {sid} is attached: its {agents.CLIS[ref['cli']].title} is open"
                                      f" (pid {live[sid].pid}); quit it there, and the session comes back by itself")
            with contextlib.suppress(ProcessionError):  # a transcript gone or rewound: said by sync itself
                await self.sync(sid)

    async def detach(self, attached: Attached) -> Synced:
        """The CLI exited: append what the person did in it, and give the session back (resumed
        to where it was, if attach suspended it and nobody else has moved it since). What it
        says was synced is every message the CLI's transcript gave the session while it was
        open: this sync's, and those an engine following the transcript appended meanwhile
        (which one got there first is a race; what the person did is the same)."""
        try:
            synced = await self.sync(attached.sid)
            if synced.branched:
                return synced
            async with self.store.snapshot() as tx:
                gained = await messages.written_by(tx, attached.sid, attached.cli, attached.length)
            return dataclasses.replace(synced, messages=gained)
        finally:
            if attached.held:
                async with self.store.snapshot() as tx:
                    row = await rows.session(tx, attached.sid)
                if row["state"] == State.SUSPENDED and row["reason"] == Reason.ATTACHED:
                    await super().resume(attached.sid)  # not refused if another CLI has it open


async def _take(tx: Tx, sid: int, read: Transcript, count: Any) -> None:
    """Append a read's messages, authored by the CLI they were read from (the agent has seen
    them all: a run never gives them to it again), with their own times, its context and, as a
    run made outside Procession, its token use. What the agent had not seen before them (a
    message sent while the person used the CLI directly) stays unseen: the next run gives it."""
    row = await rows.session(tx, sid)
    if read.messages:
        caught_up = row["agent_seen"] >= row["length"]
        await rows.append(tx, row, [(m.role, m.content, read.cli, False, m.meta,
                                     m.ts if m.ts is not None else tx.now) for m in read.messages], count)
        row = await rows.session(tx, sid)
        stamps = [m.ts for m in read.messages if m.ts is not None]
        usage = (read.tokens_in, read.tokens_out, read.cache_read, read.cache_write)
        if any(usage):
            await rows.outside_run(tx, sid, read.cli, min(stamps, default=tx.now), max(stamps, default=tx.now), usage)
        await rows.update_session(tx, sid, last_active=max(stamps, default=tx.now),
                                  **({"agent_seen": row["length"]} if caught_up else {}))
    if read.context:
        tokens, window = read.context
        await rows.update_session(tx, sid, agent_context=tokens, **({"agent_window": window} if window else {}))
