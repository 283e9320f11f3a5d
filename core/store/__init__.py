"""The workspace store: an SQLite file (the default) or a PostgreSQL database, its schema, and
the rows calls write."""

from __future__ import annotations

import os
import time
from pathlib import Path

from .base import URL_SCHEMES, Clock, Row, Store, Tx
from .sqlite import BUSY_TIMEOUT_MS, SqliteStore, workspace_path

__all__ = ["BUSY_TIMEOUT_MS", "Clock", "Row", "Store", "Tx", "default_target", "is_url", "open_store",
           "workspace_path"]

def is_url(target: Path | str) -> bool:
    """Whether ``target`` names a PostgreSQL workspace rather than a file."""
    return isinstance(target, str) and target.startswith(URL_SCHEMES)


def default_target() -> Path | str:
    """``$PROCESSION_DB`` (a file or a ``postgresql://`` address), else ``workspace.db`` in the
    platform's user data folder."""
    env = os.environ.get("PROCESSION_DB")
    if env:
        return env if is_url(env) else workspace_path(env)
    from platformdirs import user_data_dir

    return workspace_path(Path(user_data_dir("procession")) / "workspace.db")


async def open_store(target: Path | str | None = None, *, clock: Clock = time.time, create: bool = True,
                     upgrade: bool = False) -> Store:
    """The workspace ``target`` names (default: ``default_target()``), opened; ``upgrade``: a
    shared one of an older schema brought up to date (a file's is, whenever it is opened: one
    machine)."""
    if target is None:
        target = default_target()
    if is_url(target):
        from .postgres import PgStore  # psycopg only for a PostgreSQL workspace

        return await PgStore.open(str(target), clock=clock, create=create, upgrade=upgrade)
    return await SqliteStore.open(target, clock=clock, create=create)
