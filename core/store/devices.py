"""The devices paired with the web face (``devices``), the one-time links that pair them
(``pairings``), and the one-time tokens a push's buttons carry (``answer_tokens``). Each secret
is found by its hash only (the hash is what every table holds)."""

from __future__ import annotations

from .base import Row, Tx

# ---------------------------------------------------------------- pairing links


async def add_pairing(tx: Tx, token: str, name: str, read_only: bool, expires: float) -> None:
    await tx.execute("INSERT INTO pairings (token, name, read_only, expires) VALUES (?, ?, ?, ?)",
                     (token, name, int(read_only), expires))


async def pairing(tx: Tx, token: str) -> Row | None:
    return await tx.one("SELECT * FROM pairings WHERE token = ?", (token,))


async def pairing_used(tx: Tx, token: str) -> None:
    await tx.execute("UPDATE pairings SET used = ? WHERE token = ?", (tx.now, token))


# ---------------------------------------------------------------- devices


async def add_device(tx: Tx, name: str, token: str, csrf: str, read_only: int) -> int:
    """A device paired now; its id."""
    return await tx.insert("INSERT INTO devices (name, token, csrf, read_only, created) VALUES (?, ?, ?, ?, ?)",
                           (name, token, csrf, read_only, tx.now))


async def device(tx: Tx, device: int) -> Row | None:
    """A device, revoked or not."""
    return await tx.one("SELECT * FROM devices WHERE id = ?", (device,))


async def live_device(tx: Tx, device: int) -> Row | None:
    """A device, unless it was revoked."""
    return await tx.one("SELECT * FROM devices WHERE id = ? AND revoked IS NULL", (device,))


async def device_of(tx: Tx, token: str) -> Row | None:
    """The device whose secret hashes to ``token``, unless it was revoked."""
    return await tx.one("SELECT * FROM devices WHERE token = ? AND revoked IS NULL", (token,))


async def devices(tx: Tx) -> list[Row]:
    """Every device ever paired, oldest first."""
    return await tx.all("SELECT * FROM devices ORDER BY id")


async def revoke(tx: Tx, device: int) -> None:
    await tx.execute("UPDATE devices SET revoked = ? WHERE id = ?", (tx.now, device))


async def looked(tx: Tx, device: int) -> None:
    """``device`` has seen what finished until now."""
    await tx.execute("UPDATE devices SET seen = ? WHERE id = ?", (tx.now, device))


# ---------------------------------------------------------------- a push's buttons


async def add_answer_token(tx: Tx, token: str, request: int, expires: float) -> None:
    await tx.execute("INSERT INTO answer_tokens (token, request, expires) VALUES (?, ?, ?)",
                     (token, request, expires))


async def answer_token(tx: Tx, token: str) -> Row | None:
    """The request an unused answer token answers (``request``) and when it expires."""
    return await tx.one("SELECT request, expires FROM answer_tokens WHERE token = ? AND used IS NULL", (token,))


async def spend_answer_token(tx: Tx, token: str) -> bool:
    """Mark an unused answer token used; whether it was this that did (not another answer at once)."""
    return await tx.execute("UPDATE answer_tokens SET used = ? WHERE token = ? AND used IS NULL",
                            (tx.now, token)) == 1
