"""``move``: a session to another host of the workspace, with its folder and its agent CLI's
own session, and back.

The call records the move and nothing else: the file work is done by the engines of the two
hosts (``engine.moving``), each on its own machine, through the store; the steps they take
are calls of the engine's (``engine.ledger``), journaled like this one. Until the target's
engine has placed the session it stays on its old host and runs nowhere (a run asked for
meanwhile waits, and runs on the new host); a move not placed yet is taken back by moving
the session to the host it is on. Refused while a step of it runs: its process is on that
host. A fork's own folder (``fork --worktree``) moves whole: a git worktree into a clone of
its repository on the new host (``--map`` moves the repository's path), its branch with it;
merging it back then needs its parent on the same host.
"""

from __future__ import annotations

import asyncio
import json
import os

from typing import Any, Literal, Protocol

from ..model import bounds, hosts, transcripts
from ..model.calls import Call
from ..model.errors import IllegalTransition, InvalidArgument, NotFound
from ..model.outcomes import Moving
from ..model.records import MOVE_GOING, MoveInfo
from ..model.states import State
from ..model.text import plural
from ..store import Row, Tx, moves, rows
from . import native
from .base import Calls
from .files import LOCAL_KINDS, map_paths, moved_spec, moved_uri, place_agent_session
from .reads import last_move, live_holder
from .syscall import Act, syscall

#: The stages of a move that are not over (``clearing``: the session is on its new host, the
#: old one removes what it left).
UNDER_WAY = (*MOVE_GOING, "clearing")
#: How often ``moved`` looks at a move under way (it wakes at once on a change it hears of).
LOOK_S = 0.1


class MoveCalls(Calls):
    @syscall(Call.MOVE)
    async def move(self, act: Act, sid: int, to: str, *, mapping: dict[str, str] | None = None,
                   files: bool = True) -> Moving:
        """Move ``sid`` to host ``to``: its folder (moved by ``mapping``, old path prefix -> new;
        the same path by default) made there with the files it holds (``files``; else the
        folder must be there already), its bound paths and watches moved by ``mapping`` too,
        its agent's own session placed where the CLI there finds it. To the host it is on: a
        move not placed yet is taken back."""
        tx, row = act.tx, act.row
        to = hosts.check(to)
        paths = map_paths(mapping)
        if to == row["host"]:
            if (last := await take_back(tx, sid, act.now)) is not None:
                return Moving(sid, source=row["host"], target=last.target, folder=last.folder, files=last.files,
                              stage="cancelled", cancelled=True)
            raise InvalidArgument(f"session {sid} is on host {to} already")
        last = await last_move(tx, sid)
        if last is not None and last.stage in UNDER_WAY:
            raise _refused(row, f"it is moving to host {last.target} already ({last.stage}): wait for it"
                                + (f", or take it back (move {sid} --to {row['host']})" if last.going else ""))
        if await moves.running(tx, sid):
            raise _refused(row, "a step of it is held, suspended, on its host: interrupt it (or let it finish) first")
        tree = await rows.worktree(tx, sid)
        if tree is not None and not files:
            raise InvalidArgument(f"session {sid} works in a fork's own folder {tree['path']}, which moves with its"
                                  " files: move it without --no-files")
        if not await moves.known_host(tx, to):
            raise NotFound(f"no host {to} has an engine or a session in this workspace: start its engine first"
                           f" (procession --host {to} run, on that machine), then move the session")
        was = tree["path"] if tree is not None else row["cwd"]  # a fork's own folder travels whole
        resources = [r for r in await rows.resources(tx, sid) if r["kind"] in LOCAL_KINDS]
        watched = [p for t in await rows.triggers(tx, sid) for spec in [json.loads(t["spec"])]
                   for p in [*spec.get("paths", []), spec.get("repo") or ""] if isinstance(p, str) and p]
        repo = [tree["repo"]] if tree is not None and tree["repo"] else []
        for old in paths:
            if not any(transcripts.within(p, old) for p in [was, *repo, *(r["uri"] for r in resources), *watched]):
                raise InvalidArgument(f"--map {old}: no path of session {sid} is in that folder (its folder: {was})")
        if tree is not None and tree["kind"] == "git" and tree["repo"]:
            paths = _forks_follow(paths, tree["repo"], was)
        folder = transcripts.remap(was, paths)
        if files:
            if why := _shared(was):
                raise InvalidArgument(f"session {sid}'s folder {was} cannot be carried off ({why}): a move takes a"
                                      " folder's files and removes them here; give the session a folder of its own,"
                                      " or move it with --no-files")
            await _alone_in(act, was)
            await _no_forks_in(tx, row, was)
        await tx.touch(sid)  # its row shows where it goes
        await moves.start(tx, sid, row["host"], to, was, folder, json.dumps(paths), files)
        for r in resources:
            if not transcripts.within(r["uri"], was):
                there = transcripts.remap(r["uri"], paths)
                act.note(f"its bound {r['kind']} {r['uri']} is outside its folder and does not travel: on host {to} it"
                         f" is {there}" + (" (--map moves it)" if there == r["uri"] else "") + ", which must be there")
        waiting = tuple([host for host in (row["host"], to) if await live_holder(tx, host) is None])
        for host in waiting:
            act.note(f"no engine runs for host {host} now: the move waits for one (procession --host {host} run),"
                     f" or is taken back (move {sid} --to {row['host']})")
        if tree is not None and tree["kind"] == "git":
            act.note(f"its branch {tree['branch']} goes with it, into the repository {transcripts.remap(tree['repo'], paths)}"
                     f" on host {to}, which must be a clone of this one there (--map moves the repository's path)")
        if row["state"] == State.READY:
            act.note(f"its queued run waits, and runs on host {to} once the session is there")
        return Moving(sid, source=row["host"], target=to, folder=folder, files=files, stage="packing", waiting=waiting)

    async def move_info(self, sid: int) -> MoveInfo | None:
        """``sid``'s last move to another host, None if it never moved."""
        async with self.store.snapshot() as tx:
            await rows.session(tx, sid)
            return await last_move(tx, sid)

    async def moved(self, sid: int, timeout: float) -> MoveInfo:
        """Wait (at most ``timeout`` seconds) until ``sid``'s move is over: done, failed or taken
        back; its state then, or as it is when the time is up."""
        loop = asyncio.get_running_loop()
        deadline, version = loop.time() + timeout, None
        while True:
            now = await self.store.data_version()
            if now != version:
                version = now
                found = await self.move_info(sid)
                if found is None:
                    raise NotFound(f"session {sid} has not moved")
                if found.stage not in UNDER_WAY or loop.time() >= deadline:
                    return found
            elif loop.time() >= deadline:
                found = await self.move_info(sid)
                assert found is not None
                return found
            await asyncio.sleep(max(0.0, min(LOOK_S, deadline - loop.time())))


def _refused(row: Row, why: str) -> IllegalTransition:
    return IllegalTransition(Call.MOVE, row["id"], State(row["state"]), why)


def _forks_follow(paths: dict[str, str], repo: str, was: str) -> dict[str, str]:
    """``paths`` with a fork's worktree beside its repository (``TOP.forks/NAME``, where
    ``fork --worktree`` makes it) going where they put the repository, unless they say where
    the worktree goes."""
    top = os.path.dirname(repo) if os.path.basename(repo) == ".git" else None
    if top is None or transcripts.remap(was, paths) != was or transcripts.remap(top, paths) == top:
        return paths
    forks = f"{top}.forks"
    return {**paths, forks: f"{transcripts.remap(top, paths)}.forks"} if transcripts.within(was, forks) else paths


def _shared(folder: str) -> str | None:
    """Why ``folder`` is not a session's own to carry off, or None: the root, a system folder,
    one that holds the home folder, or a folder right beneath the root (``/tmp``, ``/srv``)."""
    real = os.path.realpath(folder)
    if why := bounds.too_wide(real, os.path.realpath(os.path.expanduser("~")), write=True):
        return why
    return "it is a folder of the whole system" if os.path.dirname(real) == "/" else None


async def take_back(tx: Tx, sid: int, now: float) -> MoveInfo | None:
    """End ``sid``'s move while it is not placed (taken back, or the session cancelled): the
    move as it was, None when none was going."""
    last = await last_move(tx, sid)
    if last is None or not last.going:
        return None
    await tx.touch(sid)  # the rows that showed it moving show it where it is again
    await moves.cancel(tx, sid, now)
    return last


async def _alone_in(act: Act, folder: str) -> None:
    """Refuse to carry off a folder another live session of the host works in (or beneath):
    it would lose its files. One working around it (in a folder that holds it) keeps its own
    folder, and is told that this part of it goes."""
    row = act.row
    other = await moves.session_in(act.tx, row["host"], row["id"], folder)
    if other is not None:
        raise _refused(row, f"session {other['id']} works in {other['cwd']} too, and would lose its files: move it"
                            " with --no-files (its folder stays, and must be on the other host already), or move"
                            f" session {other['id']} first")
    for other in await moves.sessions_around(act.tx, row["host"], row["id"], folder):
        act.note(f"session {other['id']} works in {other['cwd']}, around the folder that goes: it stays, without it")


async def _no_forks_in(tx: Tx, row: Row, folder: str) -> None:
    """Refuse to carry off a repository a live fork's worktree on this host belongs to: the
    worktree would be left without its git folder, its branch gone with it."""
    fork = await moves.fork_in(tx, row["host"], row["id"], folder)
    if fork is not None:
        raise _refused(row, f"session {fork['session_id']} works in {fork['path']}, a worktree of the repository in"
                            f" its folder: merge it, or move session {fork['session_id']} first")


def step_paths(move: Row) -> dict[str, str]:
    """The paths a move maps: its folder to where it goes, and what ``--map`` said."""
    return {move["was"]: move["folder"], **json.loads(move["paths"])}


def said(move: Row, *lines: str) -> str:
    return json.dumps([*json.loads(move["said"]), *lines])



class Packed(Protocol):
    """What the source's engine packed of the folder (``engine.packing.Packed``)."""

    data: bytes
    manifest: list[list[Any]]
    files: int
    size: int
    left: list[str]
    bundle: bytes | None
    tip: str | None

    def journal(self) -> dict[str, Any]: ...


class MoveSteps(Calls):
    """The steps of a move the engines take, each on its own host (``engine.moving``)."""

    async def moves_waiting(self, host: str) -> list[Row]:
        """The moves that wait for ``host``'s engine: to pack or clear (its source), to place (its target)."""
        async with self.store.snapshot() as tx:
            return await moves.waiting(tx, host)

    async def leaving(self, sid: int) -> tuple[Row, Row | None]:
        """The session as its source's engine packs it, and its own folder if it is a fork's."""
        async with self.store.snapshot() as tx:
            return await rows.session(tx, sid), await rows.worktree(tx, sid)

    async def move_pack(self, sid: int) -> tuple[bytes, bytes | None]:
        """The packed folder a move carries, and a worktree's branch bundled."""
        async with self.store.snapshot() as tx:
            found = await moves.pack(tx, sid)
        if found is None:
            raise NotFound(f"session {sid} has no move under way")
        return bytes(found["pack"] or b""), bytes(found["bundle"]) if found["bundle"] is not None else None

    @syscall(Call.MOVE, check=None)
    async def packed(self, act: Act, sid: int, packed: Packed, carried: dict[str, Any] | None) -> Moving:
        """The source's engine packed the folder (and the agent's own session): on to the target."""
        move = await _step(act.tx, sid, "packing", "source")
        lines = [f"host {move['source']} packed {plural(packed.files, 'file')} ({packed.size:,} bytes)"
                 if move["files"] else f"host {move['source']} carries no file (moved with --no-files)"]
        tree = await rows.worktree(act.tx, sid)
        if packed.tip is not None and tree is not None:
            lines.append(f"its branch {tree['branch']} goes with it, at {packed.tip[:12]}")
        if packed.left:
            lines.append(f"left out what is neither a file, a folder nor a link: {', '.join(packed.left[:5])}"
                         + (f" and {len(packed.left) - 5} more" if len(packed.left) > 5 else ""))
        left = None if tree is None else json.dumps({"kind": tree["kind"], "repo": tree["repo"],
                                                      "branch": tree["branch"], "tip": packed.tip})
        await moves.packed(act.tx, sid, packed.data if move["files"] else None, packed.bundle, left,
                           json.dumps(packed.manifest), json.dumps(carried) if carried is not None else None,
                           said(move, *lines))
        return _moving(move, "placing")

    @syscall(Call.MOVE, check=None)
    async def placed(self, act: Act, sid: int, repo: str | None = None) -> Moving:
        """The target's engine made the folder: the session is its host's now, its folder and
        paths moved, its agent's own session placed where the CLI here finds it (a fork's
        worktree: in the repository ``repo`` here)."""
        tx = act.tx
        move = await _step(tx, sid, "placing", "target")
        row = await rows.session(tx, sid)
        paths = step_paths(move)
        agent = row["agent_ref"]
        if move["carried"] is not None:
            s = {"agent_ref": native.agent_ref(row), "agent_session": json.loads(move["carried"]),
                 "env": json.loads(row["env"]) if row["env"] else {}}
            agent = await place_agent_session(act, s, move["folder"], paths, uuid=row["uuid"], own=sid)
        await rows.update_session(tx, sid, host=move["target"], cwd=transcripts.remap(row["cwd"], paths),
                                  agent_ref=agent)
        if (tree := await rows.worktree(tx, sid)) is not None:
            # the folder it came from, moved as its paths are: where it merges into on this host
            await moves.move_worktree(tx, sid, move["folder"], transcripts.remap(tree["folder"], paths),
                                      transcripts.remap(tree["source"], paths), repo or tree["repo"])
        for r in await rows.resources(tx, sid):
            if r["kind"] in LOCAL_KINDS and (uri := moved_uri(r["kind"], r["uri"], paths)) != r["uri"]:
                await moves.move_resource(tx, r["id"], uri)
        for t in await rows.triggers(tx, sid):
            spec = json.loads(t["spec"])
            if (new := moved_spec(spec, paths)) != spec:
                await moves.respec_trigger(tx, t["id"], json.dumps(new))
        lines = [f"host {move['target']} filled its folder {move['folder']}" if move["files"]
                 else f"host {move['target']} has its folder {move['folder']}", *(n.text for n in act.notes)]
        await moves.placed(tx, sid, said(move, *lines))
        return _moving(move, "clearing")

    @syscall(Call.MOVE, check=None)
    async def cleared(self, act: Act, sid: int, kept: str | None) -> Moving:
        """The source's engine removed the folder the session left (``kept``: why it did not)."""
        move = await _step(act.tx, sid, "clearing", "source")
        line = kept or (f"host {move['source']} removed its old folder {move['was']}" if move["files"]
                        else f"its folder {move['was']} stays on host {move['source']} (moved with --no-files)")
        await moves.cleared(act.tx, sid, kept, said(move, line))
        return _moving(move, "done")

    @syscall(Call.MOVE, check=None)
    async def move_failed(self, act: Act, sid: int, problem: str) -> Moving:
        """A step could not be done: the move ends, the session where it was (the files it
        made on the target are gone already; its old folder is untouched)."""
        move = await moves.going(act.tx, sid)
        if move is None:
            raise NotFound(f"session {sid} has no move under way")
        await act.tx.touch(sid)
        await moves.failed(act.tx, sid, problem)
        return _moving(move, "failed")


async def _step(tx: Tx, sid: int, stage: str, side: Literal["source", "target"]) -> Row:
    """The move of ``sid`` at ``stage``, this host its ``side`` (else it was taken back meanwhile)."""
    move = await moves.at(tx, sid, stage, side, hosts.this())
    if move is None:
        raise NotFound(f"session {sid}'s move is not at {stage} for host {hosts.this()} (taken back meanwhile)")
    return move


def _moving(move: Row, stage: str) -> Moving:
    return Moving(move["session_id"], source=move["source"], target=move["target"], folder=move["folder"],
                  files=bool(move["files"]), stage=stage)
