"""Commands on a whole workspace's store: ``migrate-store``, a copy into another store;
``upgrade``, a shared workspace brought up to this Procession's schema."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from procession.store import default_target, is_url, open_store, schema, workspace_path
from procession.store.copy import copy_workspace

from .registry import arg, command
from .terminal import emit


@command("migrate-store", "copy a whole workspace into a new one in another store (an SQLite file, a"
         " postgresql:// database), verified table by table; the source is left as it is", workspace=False, args=[
    arg("source", metavar="SOURCE", help="the workspace to copy: a file or a postgresql:// address"),
    arg("target", metavar="TARGET", help="where to: a new file, or an empty postgresql:// database"),
])
async def migrate_store(args: argparse.Namespace) -> int:
    target_file = None if is_url(args.target) else workspace_path(args.target)
    made = target_file is not None and not target_file.exists()
    source = await open_store(args.source if is_url(args.source) else workspace_path(args.source), create=False)
    try:
        target = await open_store(args.target if target_file is None else target_file, create=True)
        try:
            copied = await copy_workspace(source, target)
        except BaseException:
            await target.close()
            if made and target_file is not None:  # the file this made for the copy holds nothing
                for path in (target_file, Path(f"{target_file}-wal"), Path(f"{target_file}-shm")):
                    with contextlib.suppress(OSError):
                        path.unlink()
            raise
        await target.close()
    finally:
        await source.close()
    emit(args, copied.to_json(),
         lambda: f"copied {copied.rows} rows of {len(copied.tables)} tables from {copied.source} to {copied.target};"
                 " every table's count and SHA-256 match")
    return 0


@command("upgrade", "bring a shared (PostgreSQL) workspace up to this Procession's schema, once no engine of an older"
         " one runs on it (they are named); a file's is brought up whenever it is opened", workspace=False)
async def upgrade(args: argparse.Namespace) -> int:
    given = getattr(args, "db", None)
    target = (given if is_url(given) else workspace_path(given)) if given else default_target()
    store = await open_store(target, create=False, upgrade=True)
    done = store.upgraded
    await store.close()
    if done is None:
        emit(args, {"schema": schema.VERSION, "upgraded": False},
             f"the workspace is of this Procession's schema ({schema.VERSION}): nothing to do")
        return 0
    emit(args, {"schema": done.now, "was": done.was, "upgraded": True, "unheard": list(done.unheard)},
         lambda: f"upgraded the workspace from schema {done.was} to {done.now}" + "".join(
             f"\nnot heard, and of the older Procession if it comes back: {name}; stop it" for name in done.unheard))
    return 0
