"""The engines table: an engine's lease on its host, taken and given back (by calls, in their
transactions); its heartbeat renews it on a connection of its own (``beat``)."""

from __future__ import annotations

from .base import Tx


async def put_lease(tx: Tx, token: str, pid: int, host: str, slots: int, proc_start: float | None,
                    machine: str) -> None:
    await tx.execute(
        "INSERT INTO engines (host, token, pid, started, heartbeat, slots, proc_start, machine)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (host) DO UPDATE SET token = excluded.token,"
        " pid = excluded.pid, started = excluded.started, heartbeat = excluded.heartbeat, slots = excluded.slots,"
        " proc_start = excluded.proc_start, machine = excluded.machine",
        (host, token, pid, now := await tx.clock(), now, slots, proc_start, machine),
    )


async def drop_lease(tx: Tx, token: str) -> None:
    await tx.execute("DELETE FROM engines WHERE token = ?", (token,))
