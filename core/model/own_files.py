"""The files that are the workspace's own, beside its database: never in a run's world.

A confined run sees the folders it is bound to, whatever they hold. A workspace file kept in a
project folder (``--db ./ws.db``) would be in the world of every run bound to that folder, and
a run could rewrite it — approve itself, widen another session's bounds, erase the journal —
or read every session's agent folder and the web face's key. So each of these is covered in
a run's world (``kernel.world``: an empty folder, an empty file), whatever folder holds it;
what the run's own policy names beneath them (its session's agent folder) is shown again.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from pathlib import Path

from .agent_homes import root

#: What SQLite keeps beside a database file while it is open or after a crash.
SQLITE_SIDES = ("-wal", "-shm", "-journal")


def web(workspace: Path | str) -> Path:
    """Where the web face keeps the certificate of ``workspace`` (a file, or a ``postgresql://``
    address): beside its database file; for a PostgreSQL one (no file here), in the user's data
    folder, named from its server and database (one per database, so each keeps its own;
    nothing else of the address, which may hold a password in its query)."""
    if isinstance(workspace, str) and "://" in workspace:
        from platformdirs import user_data_dir

        parts = urllib.parse.urlsplit(workspace)
        name = f"{parts.hostname or 'local'}_{parts.port or 5432}_{parts.path.strip('/')}"
        return Path(user_data_dir("procession")) / "web" / re.sub(r"[^\w.-]+", "_", name)
    return Path(f"{os.path.abspath(workspace)}.web")


def of(workspace: Path | str) -> list[str]:
    """The workspace's own files and folders, resolved, a folder's path ending in ``/`` (what a
    run's world covers: each made first where it is not yet, so that no run can put one there,
    a WAL SQLite would replay or a hook an agent would run)."""
    found = [os.path.realpath(root(workspace)) + "/", os.path.realpath(web(workspace)) + "/"]
    if not (isinstance(workspace, str) and "://" in workspace):
        database = os.path.realpath(workspace)
        found += [database] + [database + side for side in SQLITE_SIDES]
    return found
