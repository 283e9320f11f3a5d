"""What every part of the call table shares: an open store and the actor it acts for."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import Self

from ..store import Clock, Store, open_store


class Calls:
    """An open workspace, acting on behalf of one ``actor`` (cli, tui, engine, mcp...).

    ``acting`` is the session the calls are made as, when an agent makes them (an MCP server
    started for a session): each journal row names it as its ``other`` session, where the
    call has no second session of its own. ``who`` names the person in each journal row where
    the process is not theirs alone (``as_who``: a device paired with the web face).
    ``told``, where set, is called once a request made through it is asked (``decide``): an
    engine asking on its own connection hears none of its own commits, and must look at once
    (its notifications of the request go out then, not at the next commit of another's).
    """

    def __init__(self, store: Store, actor: str = "cli", acting: int | None = None) -> None:
        self.store = store
        self.actor = actor
        self.acting = acting
        self.who: str | None = None
        self.told: Callable[[], object] | None = None

    def as_who(self, who: str) -> Self:
        """The same open workspace, its calls journaled as made by ``who`` (sharing the store:
        closing either closes both)."""
        other = copy.copy(self)
        other.who = who
        return other

    @classmethod
    async def open(cls, path: Path | str | None = None, *, actor: str = "cli", clock: Clock = time.time,
                   create: bool = True) -> Self:
        """Open (``create``: or make) the workspace at ``path``, a file or a ``postgresql://``
        address (default: ``store.default_target()``)."""
        return cls(await open_store(path, clock=clock, create=create), actor)

    async def close(self) -> None:
        await self.store.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def as_actor(self, actor: str, acting: int | None = None) -> Self:
        """The same open workspace, journaling its calls under another actor (as ``acting``)."""
        return type(self)(self.store, actor, acting)

    @property
    def path(self) -> Path | str:
        return self.store.path

    @property
    def tokenizer(self) -> str:
        return self.store.tokenizer
