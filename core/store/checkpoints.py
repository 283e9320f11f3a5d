"""The questions the calls ask of a session's checkpoints (``save SID NAME``; written by
``rows.insert_checkpoint``)."""

from __future__ import annotations

from .base import Row, Tx


async def checkpoints(tx: Tx, sid: int) -> list[Row]:
    """``id, name, seq, created`` of each of a session's checkpoints, oldest first."""
    return await tx.all("SELECT id, name, seq, created FROM checkpoints WHERE session_id = ? ORDER BY id", (sid,))


async def has_checkpoint(tx: Tx, sid: int, name: str) -> bool:
    return bool(await tx.value("SELECT 1 FROM checkpoints WHERE session_id = ? AND name = ?", (sid, name)))


async def checkpoint(tx: Tx, sid: int, name: str) -> Row | None:
    """The ``seq, state, created`` of a session's checkpoint ``name``."""
    return await tx.one("SELECT seq, state, created FROM checkpoints WHERE session_id = ? AND name = ?", (sid, name))
