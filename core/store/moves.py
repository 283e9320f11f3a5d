"""Moves of sessions between hosts (``moves``: one row a session, its last move), and what a
move asks of the sessions, runs, engines and worktrees of the hosts it goes between.

A move's stages, in order: ``packing`` (on its source), ``placing`` (on its target),
``clearing`` (its source again), ``done``; or ``cancelled`` (taken back before it was placed),
``failed``. The packed folder and the agent's own session (``pack``, ``bundle``,
``carried``) are kept only while they are on the way.
"""

from __future__ import annotations

from typing import Literal

from .base import Row, Tx

#: The other live sessions of a host (the first parameter) besides one (the second).
_LIVE = "SELECT id, cwd FROM sessions WHERE host = ? AND id <> ? AND state <> 'terminated'"


# ---------------------------------------------------------------- before a move


async def running(tx: Tx, sid: int) -> bool:
    """Whether a step of ``sid`` is under way (held, perhaps suspended, by its host's engine)."""
    return bool(await tx.value("SELECT 1 FROM runs WHERE session_id = ? AND ended IS NULL", (sid,)))


async def known_host(tx: Tx, host: str) -> bool:
    """Whether ``host`` is a host of the workspace: one an engine ran for, or a session is on."""
    return bool(await tx.value("SELECT 1 FROM engines WHERE host = ? UNION ALL SELECT 1 FROM sessions WHERE host = ?"
                               " LIMIT 1", (host, host)))


async def session_in(tx: Tx, host: str, sid: int, folder: str) -> Row | None:
    """A live session of ``host`` but ``sid`` that works in ``folder`` or beneath it (its id and cwd)."""
    return await tx.one(_LIVE + " AND (cwd = ? OR substr(cwd, 1, length(?) + 1) = ? || '/') ORDER BY id LIMIT 1",
                        (host, sid, folder, folder, folder))


async def sessions_around(tx: Tx, host: str, sid: int, folder: str) -> list[Row]:
    """Up to three live sessions of ``host`` but ``sid`` that work in a folder holding ``folder``."""
    return await tx.all(_LIVE + " AND substr(?, 1, length(cwd) + 1) = cwd || '/' ORDER BY id LIMIT 3",
                        (host, sid, folder))


async def fork_in(tx: Tx, host: str, sid: int, folder: str) -> Row | None:
    """A live session of ``host`` but ``sid`` whose worktree belongs to a repository in (or
    at) ``folder``: its ``session_id`` and ``path``."""
    return await tx.one(
        "SELECT w.session_id, w.path FROM worktrees w JOIN sessions s ON s.id = w.session_id WHERE w.removed IS NULL"
        " AND w.kind = 'git' AND s.host = ? AND s.state <> 'terminated' AND s.id <> ?"
        " AND (w.repo = ? OR substr(w.repo, 1, length(?) + 1) = ? || '/') ORDER BY w.session_id LIMIT 1",
        (host, sid, folder, folder, folder))


# ---------------------------------------------------------------- the move and its stages


async def start(tx: Tx, sid: int, source: str, target: str, was: str, folder: str, paths: str, files: bool) -> None:
    """``sid``'s move, packing now, in place of its last one (``paths``: the ``--map`` as JSON)."""
    await tx.execute("DELETE FROM moves WHERE session_id = ?", (sid,))
    await tx.execute(
        "INSERT INTO moves (session_id, source, target, was, folder, paths, files, stage, created, updated)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, 'packing', ?, ?)",
        (sid, source, target, was, folder, paths, int(files), tx.now, tx.now))


async def cancel(tx: Tx, sid: int, now: float) -> None:
    """``sid``'s move taken back, at ``now``; what it carried is dropped."""
    await tx.execute("UPDATE moves SET stage = 'cancelled', pack = NULL, bundle = NULL, carried = NULL,"
                     " updated = ? WHERE session_id = ?", (now, sid))


async def waiting(tx: Tx, host: str) -> list[Row]:
    """The moves that wait for ``host``'s engine: to pack or clear (its source), to place (its target)."""
    return await tx.all(
        "SELECT session_id, source, target, was, folder, paths, files, stage, manifest, tree FROM moves"
        " WHERE (source = ? AND stage IN ('packing', 'clearing')) OR (target = ? AND stage = 'placing')"
        " ORDER BY session_id", (host, host))


async def pack(tx: Tx, sid: int) -> Row | None:
    """What ``sid``'s move carries: its packed folder (``pack``) and bundled branch (``bundle``)."""
    return await tx.one("SELECT pack, bundle FROM moves WHERE session_id = ?", (sid,))


async def at(tx: Tx, sid: int, stage: str, side: Literal["source", "target"], host: str) -> Row | None:
    """``sid``'s move, if it is at ``stage`` with ``host`` its ``side``."""
    return await tx.one(f"SELECT * FROM moves WHERE session_id = ? AND stage = ? AND {side} = ?",
                        (sid, stage, host))


async def going(tx: Tx, sid: int) -> Row | None:
    """``sid``'s move, if it is not placed yet (packing or placing)."""
    return await tx.one("SELECT * FROM moves WHERE session_id = ? AND stage IN ('packing', 'placing')", (sid,))


async def packed(tx: Tx, sid: int, pack: bytes | None, bundle: bytes | None, tree: str | None, manifest: str,
                 carried: str | None, said: str) -> None:
    """``sid``'s move packed, on to its target: what it carries there, and what it said (JSON texts)."""
    await tx.execute(
        "UPDATE moves SET stage = 'placing', pack = ?, bundle = ?, tree = ?, manifest = ?, carried = ?, said = ?,"
        " updated = ? WHERE session_id = ?",
        (pack, bundle, tree, manifest, carried, said, tx.now, sid))


async def placed(tx: Tx, sid: int, said: str) -> None:
    """``sid``'s move placed, its source to clear up; what it carried is dropped."""
    await tx.execute("UPDATE moves SET stage = 'clearing', pack = NULL, bundle = NULL, carried = NULL, said = ?,"
                     " updated = ? WHERE session_id = ?", (said, tx.now, sid))


async def cleared(tx: Tx, sid: int, kept: str | None, said: str) -> None:
    """``sid``'s move done (``kept``: why its old folder stayed)."""
    await tx.execute("UPDATE moves SET stage = 'done', manifest = NULL, problem = ?, said = ?, updated = ?"
                     " WHERE session_id = ?", (kept, said, tx.now, sid))


async def failed(tx: Tx, sid: int, problem: str) -> None:
    """``sid``'s move ended by ``problem``; what it carried is dropped."""
    await tx.execute("UPDATE moves SET stage = 'failed', problem = ?, pack = NULL, bundle = NULL, carried = NULL,"
                     " updated = ? WHERE session_id = ?", (problem, tx.now, sid))


# ---------------------------------------------------------------- what a placed session's rows say


async def move_worktree(tx: Tx, sid: int, path: str, folder: str, source: str, repo: str | None) -> None:
    """``sid``'s own folder where the move put it: at ``path``, a worktree of ``repo`` there."""
    await tx.execute(
        "UPDATE worktrees SET path = ?, folder = ?, source = ?, repo = ? WHERE session_id = ? AND removed IS NULL",
        (path, folder, source, repo, sid))


async def move_resource(tx: Tx, resource: int, uri: str) -> None:
    await tx.execute("UPDATE resources SET uri = ? WHERE id = ?", (uri, resource))


async def respec_trigger(tx: Tx, trigger: int, spec: str) -> None:
    """A trigger's spec (JSON) with its paths where the move put them."""
    await tx.execute("UPDATE triggers SET spec = ? WHERE id = ?", (spec, trigger))
