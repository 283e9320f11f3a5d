"""Commands on a whole workspace's store: ``migrate-store``, a copy into another store."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from procession.store import is_url, open_store, workspace_path
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
