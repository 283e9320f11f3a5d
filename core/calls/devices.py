"""The devices paired with the web face (``procession web``): a one-time pairing link made at
the terminal, redeemed once by a browser, which gets a long-lived device secret (its cookie);
devices listed and revoked; and the one-time tokens a push's buttons carry (``answer_token``,
``redeem``), each of which answers one request once.

A secret is stored only as its SHA-256 (a copy of the store gives nobody a way in), compared in
constant time by the database's unique index on the hash; a pairing link may be used once,
within its minutes; a revoked device is refused at its next request. Each is a journaled call
(``pair``, ``paired``, ``revoke``), whose rows never hold a secret.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

from ..model import limits
from ..model.calls import Call
from ..model.errors import InvalidArgument, NotFound
from ..model.outcomes import Paired, Pairing, Revoked
from ..store import Tx, devices
from .base import Calls
from .syscall import Act, syscall

#: How long a pairing link may be used, by default, and at most (minutes).
PAIR_MINUTES = 10.0
PAIR_MINUTES_MAX = 60.0
#: Random bytes in a secret (a link's, a device's, a CSRF token, a push's button's).
SECRET_BYTES = 32
#: How long a push's buttons may answer its request (hours): a request older than that is
#: answered on the page, where it is seen whole.
BUTTON_HOURS = 24.0


class _Secret(str):
    """A secret given to a call: its journal row says only that one was given."""

    __slots__ = ()

    def journal(self) -> str:
        return "(a secret)"


def hashed(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "replace")).hexdigest()


@dataclass(slots=True, frozen=True)
class Device:
    """A paired device, as the web face checks it at each request."""

    id: int
    name: str
    read_only: bool
    csrf: str
    created: float
    seen: float | None
    revoked: float | None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "read_only": self.read_only, "created": self.created,
                "seen": self.seen, "revoked": self.revoked}


def _device(row: Any) -> Device:
    return Device(row["id"], row["name"], bool(row["read_only"]), row["csrf"], row["created"], row["seen"],
                  row["revoked"])


async def answer_token(tx: Tx, request: int) -> str:
    """A token that answers ``request`` once, within ``BUTTON_HOURS`` (a push's buttons carry
    it to the web face, which holds no cookie of theirs): stored as its hash only."""
    secret = secrets.token_urlsafe(SECRET_BYTES)
    await devices.add_answer_token(tx, hashed(secret), request, tx.now + BUTTON_HOURS * 3600)
    return secret


class DeviceCalls(Calls):
    @syscall(Call.PAIR, session=None, check=None)
    async def pair(self, act: Act, name: str, *, read_only: bool = False, minutes: float = PAIR_MINUTES) -> Pairing:
        """A one-time link that pairs the device ``name`` (``read_only``: one that may only look),
        usable once within ``minutes``."""
        name = limits.name(name, "device name")
        if not 0 < minutes <= PAIR_MINUTES_MAX:
            raise InvalidArgument(f"a pairing link lasts more than 0 and at most {PAIR_MINUTES_MAX:g} minutes")
        secret = secrets.token_urlsafe(SECRET_BYTES)
        expires = act.now + minutes * 60
        await devices.add_pairing(act.tx, hashed(secret), name, read_only, expires)
        return Pairing(0, name, read_only, expires, secret)

    async def paired(self, link: str) -> Paired:
        """The device a pairing link's secret makes, once: a link used before, expired or
        unknown is refused in one line, saying no more than that."""
        return await self._paired(_Secret(link))

    @syscall(Call.PAIRED, session=None, check=None)
    async def _paired(self, act: Act, link: _Secret) -> Paired:
        found = await devices.pairing(act.tx, hashed(link))
        if found is None or found["used"] is not None or found["expires"] < act.now:
            raise InvalidArgument("this pairing link is not valid (used, expired or unknown): make another with"
                                  " procession web --pair NAME")
        await devices.pairing_used(act.tx, found["token"])
        secret, csrf = secrets.token_urlsafe(SECRET_BYTES), secrets.token_urlsafe(SECRET_BYTES)
        device = await devices.add_device(act.tx, found["name"], hashed(secret), csrf, found["read_only"])
        return Paired(0, device, found["name"], bool(found["read_only"]), secret, csrf)

    @syscall(Call.REVOKE, session=None, check=None)
    async def revoke(self, act: Act, device: int) -> Revoked:
        """``device`` may no longer reach the web face (from its next request on)."""
        found = await devices.device(act.tx, device)
        if found is None:
            raise NotFound(f"no device {device} (procession web --devices lists them)")
        if found["revoked"] is not None:
            raise InvalidArgument(f"device {device} ({found['name']}) is revoked already")
        await devices.revoke(act.tx, device)
        return Revoked(0, device, found["name"])

    async def redeem(self, token: str) -> int:
        """The request a push's button's ``token`` answers, once: the token is spent by this
        (whatever the answer then meets: a request answered meanwhile stays as it was). One
        used before, expired or unknown is refused in one line, saying no more than that."""
        async def use(tx: Tx) -> int:
            found = await devices.answer_token(tx, hashed(token))
            if found is None or found["expires"] < tx.now or not await devices.spend_answer_token(tx, hashed(token)):
                raise InvalidArgument("this button may no longer answer (used, expired or unknown): answer on the page")
            return int(found["request"])
        return await self.store.atomic(use)

    async def looked(self, device: int) -> float:
        """``device`` has seen what finished until now (its page's "finished since you looked"
        starts again from here); when that is."""
        async def mark(tx: Tx) -> float:
            await devices.looked(tx, device)
            return tx.now
        return await self.store.atomic(mark)

    # ------------------------------------------------------------------ reads

    async def devices(self) -> list[Device]:
        """Every device ever paired, revoked ones too, oldest first."""
        async with self.store.snapshot() as tx:
            return [_device(r) for r in await devices.devices(tx)]

    async def device(self, secret: str) -> Device | None:
        """The device a cookie's secret names, if it is paired and not revoked."""
        if not secret:
            return None
        async with self.store.snapshot() as tx:
            row = await devices.device_of(tx, hashed(secret))
        return _device(row) if row is not None else None

    async def still(self, device: int) -> Device | None:
        """``device`` as it is now, if it is paired still (an open stream looks each time it sends)."""
        async with self.store.snapshot() as tx:
            row = await devices.live_device(tx, device)
        return _device(row) if row is not None else None
