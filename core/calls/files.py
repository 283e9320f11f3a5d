"""``save`` and ``load``: checkpoints inside the store, and portable snapshot files.

One call each, whatever the form: ``save SID NAME`` keeps a checkpoint in the store and
``save SID file=F`` writes a snapshot file; ``load FILE`` makes a session from a snapshot and
``load SID CHECKPOINT`` one from a checkpoint. Both stream, so that memory stays flat in
the history: a snapshot is read in one read transaction and written a batch of messages at
a time to a temporary file beside its destination, the call is journaled, and the file is
renamed into place after the commit; a file to load is read a part at a time into the write
transaction, checked as it goes (its hash too), and a file found bad, however far in, rolls
the transaction back whole.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..model import agent_homes, agents, bounds, environ, limits, snapshot, snapshot_process, transcripts, trigger_spec, user_files
from ..model.calls import Call
from ..model.errors import InvalidArgument, NotFound, ProcessionError, SnapshotError
from ..model.outcomes import Loaded, Saved
from ..model.records import Checkpoint, Fold
from ..model.text import plural
from ..store import agents as agent_rows
from ..store import checkpoints, messages, rows, sessions
from . import history, native
from .base import Calls
from .context import write_counted_fold
from .lineage import basis, branch
from .merge import canonical
from .syscall import Act, syscall

Progress = Callable[[int, int], None]


@dataclass(slots=True)
class _Reading:
    """A snapshot file being read into a load: its parts, and what was found in them."""

    parts: Iterator[snapshot.Part]
    messages: int = 0
    folds: int = 0
    triggers: int = 0

    def journal(self) -> dict[str, Any]:
        return {"messages": self.messages, "folds": self.folds, "triggers": self.triggers}


@dataclass(slots=True)
class _Staged:
    """A snapshot written whole to a temporary file, waiting to be renamed into place."""

    tmp: Path
    path: Path
    size: int
    sha256: str
    messages: int

    def journal(self) -> dict[str, Any]:
        return {"bytes": self.size}

    def commit(self) -> None:
        os.replace(self.tmp, self.path)

    def discard(self) -> None:
        self.tmp.unlink(missing_ok=True)


class FileCalls(Calls):
    async def save(self, sid: int, name: str | None = None, *, file: str | None = None,
                   replace: bool = False) -> Saved:
        """A checkpoint ``name`` in the store, or a snapshot ``file`` (owner-only, written whole
        or not at all; an existing file is replaced only with ``replace``)."""
        if (name is None) == (file is None):
            raise InvalidArgument("save takes a checkpoint name or a file, not both and not neither")
        if name is not None:
            return await self._checkpoint(sid, name)
        assert file is not None
        path = Path(file).expanduser().absolute()
        if path.exists() and not replace:
            raise InvalidArgument(f"{path} exists; replace it explicitly (--force) or choose another file")
        async with self.store.snapshot() as tx:
            await rows.session(tx, sid)
            staged = await _stage(path, tx, sid)
        try:
            return await self._saved(sid, str(path), staged)
        finally:
            staged.discard()

    @syscall(Call.SAVE)
    async def _checkpoint(self, act: Act, sid: int, name: str) -> Saved:
        limits.name(name, "checkpoint name")
        if await checkpoints.has_checkpoint(act.tx, sid, name):
            raise InvalidArgument(f"session {sid} already has a checkpoint named {name!r}")
        state = {"memory": await rows.memory(act.tx, sid),
                 "folds": [f.to_json() for f in await history.folds(act.tx, sid)]}
        cid = await rows.insert_checkpoint(act.tx, sid, name, act.row["length"], state)
        return Saved(sid, checkpoint=Checkpoint(cid, name, act.row["length"], act.now), messages=act.row["length"])

    @syscall(Call.SAVE)
    async def _saved(self, act: Act, sid: int, file: str, staged: _Staged) -> Saved:
        act.after(staged.commit)
        return Saved(sid, file=file, messages=staged.messages, bytes=staged.size, sha256=staged.sha256)

    async def load(self, source: str | int, checkpoint: str | None = None, *, name: str | None = None,
                   progress: Progress | None = None, mapping: dict[str, str] | None = None) -> Loaded:
        """A new session from a snapshot file (``source`` a path), or forked at a session's
        checkpoint (``source`` its SID, with ``checkpoint``).

        A loaded file's runner and triggers arrive disarmed (``approve`` arms them): a file
        from elsewhere never runs anything by itself; its ``after`` triggers are left out,
        since they name sessions of the workspace it came from. ``mapping`` (old path prefix
        -> new, ``load --map``) moves the session's folder, its bound paths, its watches and
        the paths inside the agent's own session it carries, which is written where this
        machine's CLI finds it, so that its next run resumes it here. The file must be a
        regular one; one not laid out as ``save`` writes it is read whole, up to
        ``user_files.SNAPSHOT_WHOLE_MAX``.
        """
        mapping = map_paths(mapping)
        if checkpoint is not None:
            if not isinstance(source, int):
                raise InvalidArgument("loading a checkpoint takes the session's SID first")
            return await self._restore(source, checkpoint, name)
        if name is not None:
            raise InvalidArgument("a name applies to loading a checkpoint; a snapshot keeps its own")
        file = str(source)
        path = os.path.abspath(file)
        try:
            with user_files.open_regular(file) as fh, closing(snapshot_process.read(fh, file)) as parts:
                return await self._load_file(path, _Reading(parts), progress=progress, mapping=mapping)
        except snapshot.NotAsWritten:
            pass  # rewritten by another tool, or damaged: only a whole read tells which
        except OSError as exc:
            raise SnapshotError(f"cannot read {file}: {exc.strerror}") from None
        try:
            data = user_files.read_file(file, user_files.SNAPSHOT_WHOLE_MAX)
        except OSError as exc:
            raise SnapshotError(f"cannot read {file}: {exc.strerror}") from None
        return await self._load_file(path, _Reading(snapshot.parse(data, file).parts()), progress=progress,
                                     mapping=mapping)

    @syscall(Call.LOAD, session="result", check=None)
    async def _load_file(self, act: Act, file: str, reading: _Reading, *,
                         progress: Progress | None = None, mapping: dict[str, str] | None = None) -> Loaded:
        tx, count = act.tx, self.store.count_tokens
        # the session comes after the messages in the file: its row is made first and filled
        # in once read, its agent's reference checked when the transaction commits
        await tx.defer_references()
        sid = await rows.insert_session(tx, 0, agent_id=0, name="", runner="", window=0, cwd=os.getcwd(), armed=0)
        fresh = await sessions.history_end(tx, sid)
        assert fresh is not None
        parts: dict[str, Any] = {}
        for key, value in reading.parts:
            if key == "messages":
                reading.messages = await rows.append(tx, fresh, value, count, progress)
            else:
                parts[key] = value
        s = parts["session"]
        triggers = []
        for t in parts["triggers"]:
            if t["kind"] != "after":
                try:
                    triggers.append((t["kind"], trigger_spec.revalidate(t["kind"], t["spec"])))
                except InvalidArgument as exc:
                    raise SnapshotError(f"{file} is not a valid snapshot: {exc}") from None
        system = s["system"]
        system_tokens = count(system) if system else 0
        context = await sessions.context_tokens(tx, sid)
        paths = dict(mapping or {})
        _unmatched(act, paths, [s.get("cwd") or "", *(r["uri"] for r in parts["resources"] if r["kind"] in LOCAL_KINDS),
                                *(p for _, spec in triggers for p in [*spec.get("paths", []), spec.get("repo") or ""]
                                  if isinstance(p, str))])
        cwd = _folder(act, s.get("cwd"), paths)
        settings = {k: v for k, v in (s.get("env") or {}).items() if k not in environ.RESERVED}
        if len(settings) != len(s.get("env") or {}):
            act.note(f"its setting {', '.join(sorted(set(s['env']) - set(settings)))} is left out: each run has its own")
        await rows.update_session(
            tx, sid, agent_id=await rows.agent_id(tx, s["agent"]), name=s["name"], goal=s["goal"], system=system,
            priority=s["priority"], runner=s["runner"], window=s["window"], timeout=s["timeout"],
            system_tokens=system_tokens, context_tokens=context + system_tokens, cwd=cwd,
            env=json.dumps(settings) if settings else None,
            pass_env=json.dumps(s["passed"]) if s.get("passed") else None,
            confine=s.get("confine", bounds.BOUND), net=s.get("net", bounds.ANY),
            permissions=s.get("permissions", bounds.BOUND),
            agent_ref=(ref := await place_agent_session(act, s, cwd, paths, uuid=fresh["uuid"])),
            agent_seen=s.get("agent_seen", 0) if ref else 0,
        )
        reading.folds = await _refold(tx, sid, parts["folds"], count, file)
        await rows.put_memory(tx, sid, {k: canonical(v) for k, v in parts["memory"].items()})
        await rows.insert_resources(tx, sid, [(r["kind"], moved_uri(r["kind"], r["uri"], paths), r["mode"])
                                              for r in parts["resources"]])
        await rows.insert_triggers(tx, sid, [(kind, moved_spec(spec, paths)) for kind, spec in triggers])
        reading.triggers = len(triggers)
        act.note("its runner and triggers are disarmed until it is approved", Call.APPROVE, sid)
        dropped = len(parts["triggers"]) - len(triggers)
        if dropped:
            act.note(f"{plural(dropped, 'after trigger')} left out: an after trigger names a session of the"
                     " workspace the file came from (add it again here with trigger add)")
        return Loaded(sid, file, reading.messages)

    @syscall(Call.LOAD, session="result", other="sid", check="sid")
    async def _restore(self, act: Act, sid: int, checkpoint: str, name: str | None = None) -> Loaded:
        """A new session forked at ``sid``'s checkpoint, with the memory and folds it had then."""
        cp = await checkpoints.checkpoint(act.tx, sid, checkpoint)
        if cp is None:
            raise NotFound(f"session {sid} has no checkpoint named {checkpoint!r}")
        state = json.loads(cp["state"])
        folds = [Fold(**f) for f in state["folds"]]
        child = await branch(act.tx, act.row, name or f"{act.row['name']}@{checkpoint}", state["memory"], folds,
                             cp["created"], await basis(act.tx, act.row, cp["seq"], state["memory"]))
        return Loaded(child, f"{sid}:{checkpoint}", cp["seq"])


#: The resource kinds whose URI is a path of this machine (``load --map`` moves them).
LOCAL_KINDS = limits.PATH_KINDS


def map_paths(mapping: dict[str, str] | None) -> dict[str, str]:
    """``--map OLD=NEW`` pairs (``load``, ``move``), each side an absolute path, normalised;
    refused in one line if not."""
    for old, new in (mapping or {}).items():
        if not (os.path.isabs(old) and os.path.isabs(new)):
            raise InvalidArgument(f"--map takes absolute paths, OLD=NEW: {old}={new}")
    return {os.path.normpath(old): os.path.normpath(new) for old, new in (mapping or {}).items()}


def _unmatched(act: Act, paths: dict[str, str], found: list[str]) -> None:
    """Say which ``--map`` folders no path of the session starts with (a typo, most likely)."""
    for old in paths:
        if not any(transcripts.within(p, old) for p in found if p):
            act.note(f"--map {old}: no path of the session is in that folder")


def _folder(act: Act, saved: str | None, paths: dict[str, str]) -> str:
    """The loaded session's folder: the saved one moved by ``paths``, if it is here; else
    this process's, and the saved one is mapped to it (the agent's session follows)."""
    if saved is None:  # a snapshot of an older version: it did not say
        return os.getcwd()
    moved = transcripts.remap(saved, paths)
    if os.path.isdir(moved):
        return moved
    here = os.getcwd()
    what = f"the folder --map gives it, {moved}," if moved != saved else f"its folder {moved}"
    where = "the folder it was saved in" if here == saved else f"{here} (load --map {saved}={here} says so)"
    act.note(f"{what} is not here: it works in {where}")
    if here != saved:
        paths[saved] = here
    return here


async def place_agent_session(act: Act, s: dict[str, Any], cwd: str, paths: dict[str, str], *, uuid: str,
                              own: int | None = None) -> str | None:
    """The loaded session's agent reference: the agent's own session it carries, placed where
    this machine's CLI finds it for the session ``uuid`` (its own state folder, seeded here:
    ``agent_homes``; its paths moved), forked by its first run if a session here stands for it
    already; else a copy of the reference, which its first run forks (the agent's session may
    be on this machine: it is not touched)."""
    ref = s.get("agent_ref")
    if not ref:
        return None
    carried = s.get("agent_session")
    if carried is None:
        return json.dumps({**ref, "fork": True})
    fmt = transcripts.format_of(ref["cli"])
    user = environ.session_environment(ref["cli"], s.get("env") or {}, [], os.environ)
    env = agent_homes.seeded(ref["cli"], user, act.tx.store.path, {"uuid": uuid}, cwd)
    title = agents.CLIS[ref["cli"]].title
    try:  # on the store's own thread, as the call's body runs
        placed = fmt.place(carried, env, cwd, paths)
        read = fmt.read(native.followed(placed))
    except transcripts.Differs as exc:  # it went on after the save: the copy cannot resume it, nor fork it here
        act.note(f"{exc}: its first run starts a {title} session of its own, given the history so far")
        return None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a carried session of another shape
        raise SnapshotError(f"the {title} session the snapshot carries cannot be"
                            f" placed here: {type(exc).__name__} {exc}") from None
    held = await agent_rows.holder(act.tx, ref["cli"], placed["id"], besides=own)
    if placed.pop("already", False) or held is not None:  # its source is here (this workspace or another)
        whose = f"session {held}'s" if held is not None else "on this machine already"
        act.note(f"its {title} session {placed['id']} is {whose}: its first run makes one of its own from it"
                 " (a fork), so that neither writes into the other's")
        return json.dumps({**placed, "position": read.position.as_json(), "fork": True})
    act.note(f"its {title} session {placed['id']} is placed where {title} finds it here: its next run resumes it")
    return json.dumps({**placed, "position": read.position.as_json()})


def moved_uri(kind: str, uri: str, paths: dict[str, str]) -> str:
    return transcripts.remap(uri, paths) if kind in LOCAL_KINDS else uri


def moved_spec(spec: dict[str, Any], paths: dict[str, str]) -> dict[str, Any]:
    """A watch's paths and a commit trigger's repository, moved by ``paths``."""
    moved = dict(spec)
    if isinstance(moved.get("paths"), list):
        moved["paths"] = [transcripts.remap(p, paths) if isinstance(p, str) else p for p in moved["paths"]]
    if isinstance(moved.get("repo"), str):
        moved["repo"] = transcripts.remap(moved["repo"], paths)
    return moved


async def _payload(tx: Any, sid: int) -> dict[str, Any]:
    """A session as a snapshot's payload, but for its messages (``_messages`` streams them)."""
    row = await rows.session(tx, sid)
    return {
        "session": {
            "uuid": row["uuid"], "name": row["name"], "agent": row["agent"], "goal": row["goal"],
            "system": row["system"], "priority": row["priority"], "runner": row["runner"],
            "window": row["window"], "timeout": row["timeout"], "created": row["created"],
            # settings, not secrets: a passed name travels, its value never does
            "env": json.loads(row["env"]) if row["env"] else {},
            "passed": json.loads(row["pass_env"]) if row["pass_env"] else [],
            "confine": row["confine"], "net": row["net"], "permissions": row["permissions"],
            "agent_ref": native.agent_ref(row),
            "agent_seen": row["agent_seen"],
            "cwd": row["cwd"],
            **({"agent_session": agent_session} if (agent_session := await carried(row, tx.store.path)) else {}),
        },
        "folds": [{"lo": f.lo, "hi": f.hi, "summary": f.summary, "created": f.created}
                  for f in await history.folds(tx, sid)],
        "memory": {k: json.loads(v) for k, v in (await rows.memory(tx, sid)).items()},
        "resources": [{"kind": r["kind"], "uri": r["uri"], "mode": r["mode"]} for r in await rows.resources(tx, sid)],
        "triggers": [{"kind": t["kind"], "spec": json.loads(t["spec"])} for t in await rows.triggers(tx, sid)],
    }


async def carried(row: Any, workspace: Path | str) -> dict[str, Any] | None:
    """The agent's own session, as its CLI keeps it, for a snapshot to carry (None: it has
    none of its own yet, its files are gone from here, or Procession does not read them)."""
    ref = native.agent_ref(row)
    if ref is None or ref.get("fork") or ref["cli"] not in transcripts.CLIS:
        return None
    fmt = transcripts.format_of(ref["cli"])
    found: dict[str, Any] | None = await asyncio.to_thread(fmt.carry, ref, native.cli_environment(row, workspace))
    return found


async def _messages(tx: Any, sid: int, seen: list[int]) -> AsyncIterator[list[dict[str, Any]]]:
    """The history as a snapshot's messages, a batch at a time; ``seen[0]`` counts them."""
    async for batch in history.batches(tx, sid):
        seen[0] += len(batch)
        yield [{"seq": m.seq, "role": m.role, "content": m.content, "author": m.author, "pinned": m.pinned,
                "created": m.created, "meta": m.meta} for m in batch]


async def _stage(path: Path, tx: Any, sid: int) -> _Staged:
    """Write ``sid``'s snapshot to a temporary file beside ``path``, readable by the owner
    only, synced; streamed from the read transaction ``tx``, hashed while written."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    seen = [0]
    try:
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        with os.fdopen(fd, "wb") as fh:
            size, sha256 = await snapshot.write(fh, await _payload(tx, sid), _messages(tx, sid, seen))
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ProcessionError(f"cannot write {path}: {exc.strerror}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return _Staged(tmp, path, size, sha256, seen[0])


async def _refold(tx: Any, sid: int, specs: list[dict[str, Any]], count: Callable[[str], int],
                  source: str) -> int:
    """Fold a loaded history as its snapshot says, checking that the folds nest; each hides
    the items of the context its range holds then (summaries of earlier folds, unprotected
    messages outside them), counted in SQL, so no history is read into memory."""
    made: list[tuple[int, int, int]] = []  # lo, hi, summary tokens
    for n, spec in enumerate(specs, start=1):
        lo, hi, summary = spec["lo"], spec["hi"], spec["summary"]
        for f_lo, f_hi, _ in made:
            if not (f_hi < lo or f_lo > hi or (lo <= f_lo and f_hi <= hi)):
                raise SnapshotError(f"{source} is not a valid snapshot: fold {n} overlaps an earlier one")
        inside = [(i, f) for i, f in enumerate(made) if lo <= f[0] and f[1] <= hi]
        # an earlier fold is in the context unless a later earlier one holds it
        shown = [f for i, f in inside if not any(j > i and g[0] <= f[0] and f[1] <= g[1] for j, g in inside)]
        hidden, tokens = await messages.unprotected(tx, sid, lo, hi)
        for f_lo, f_hi, f_tokens in shown:
            c, t = await messages.unprotected(tx, sid, f_lo, f_hi)
            hidden, tokens = hidden - c + 1, tokens - t + f_tokens
        if not hidden:
            raise SnapshotError(f"{source} is not a valid snapshot: fold {n} hides nothing")
        summary_tokens = count(summary)
        await write_counted_fold(tx, await rows.session(tx, sid), lo, hi, summary, summary_tokens, hidden, tokens,
                                 spec.get("created"))
        made.append((lo, hi, summary_tokens))
    return len(made)
