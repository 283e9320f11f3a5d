"""The workspace's own facts, by key (``meta``): its schema, its change stamp, and what a face
marks it with (``procession demo``'s workspace says where its files are)."""

from __future__ import annotations

from .base import Tx


async def get(tx: Tx, key: str) -> str | None:
    found: str | None = await tx.value("SELECT value FROM meta WHERE key = ?", (key,))
    return found


async def put(tx: Tx, key: str, value: str) -> None:
    """Set ``key`` to ``value``, replacing what it was."""
    await tx.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                     (key, value))
