"""``procession``: every system call from the shell, ``--json`` for scripts; with no command,
the monitor.

The CLI is a face: each command maps its arguments to one call of ``procession.calls`` and
prints what the present layer makes of the outcome. A refused call prints one line,
``procession: error: ...``, and exits 1 (3 for unresolved merge conflicts); a usage mistake
exits 2; a ``wait`` that timed out exits 124. Its commands live in modules named like the call table's (``lifecycle``,
``context``, ``lineage``, ``files``, ``bindings``, ``reads``), each with its options beside
its handler.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from procession.calls import Workspace
from procession.model import hosts
from procession.model.errors import ProcessionError, StoreUnreachable, WorkspaceError
from procession.present.parse import Malformed
from procession.present.words import printable
from procession.store import default_target, is_url, workspace_path

from . import agents, bindings, budgets, context, engine, files, lifecycle, lineage, mcp, monitor, permissions, reads, settings, stores, web  # noqa: F401  (they register)
from .registry import Command, build_parser
from .terminal import PROG, UsageError, error, refusal

__all__ = ["main"]


async def run(command: Command, args: object) -> int:
    if not command.workspace:
        return await command.handler(args)
    given = getattr(args, "db", None)
    target = (given if is_url(given) else workspace_path(given)) if given else default_target()
    new = command.creates and not is_url(target) and not Path(target).exists()
    try:
        opened = await (_patiently(given) if command.patient else Workspace.open(given, actor="cli",
                                                                                 create=command.creates))
    except WorkspaceError as exc:
        demo = monitor.demo_path()
        if given or os.environ.get("PROCESSION_DB") or Path(default_target()).exists() or not demo.exists():
            raise  # not the default workspace missing where the demo's is at hand
        raise WorkspaceError(f"{exc}; the demo's is {demo}: give --db {demo}, or set PROCESSION_DB to it") from None
    if opened is None:
        return 0  # stopped while it waited
    ws = opened
    try:
        return await command.handler(ws, args)
    except ProcessionError:
        if new and not await ws.journal(limit=1):  # refused: the workspace it made holds nothing
            await ws.close()
            for path in (Path(ws.store.path), Path(f"{ws.store.path}-wal"), Path(f"{ws.store.path}-shm")):
                with contextlib.suppress(OSError):
                    path.unlink()
        raise
    finally:
        await ws.close()


async def _patiently(given: str | None) -> Workspace | None:
    """The workspace, once its database can be reached: a daemon started before the server
    (a reboot, an outage) waits for it, saying so once, instead of giving up. None: stopped by
    SIGINT or SIGTERM meanwhile."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        delay, said = 0.5, False
        while True:
            try:
                ws = await Workspace.open(given, actor="cli")
            except StoreUnreachable as exc:
                if not said:
                    print(f"{PROG}: {refusal(str(exc))}; waiting for it", file=sys.stderr, flush=True)
                    said = True
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
                if stop.is_set():
                    return None
                delay = min(delay * 2, 5.0)
                continue
            if said:
                print(f"{PROG}: the workspace database is reached: going on", file=sys.stderr, flush=True)
            return ws
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def _say_store_progress() -> None:
    """What the store says while it works a long time at opening (indexing an older
    workspace's messages for search) goes to standard error, a line each."""
    said = logging.getLogger("procession.store")
    if not said.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(f"{PROG}: %(message)s"))
        said.addHandler(handler)
        said.setLevel(logging.INFO)
        said.propagate = False  # an engine's own log would say it twice


def main(argv: Sequence[str] | None = None) -> int:
    # a command is a short process: what it has imported lives to its end, so the collector
    # need not walk it each time it looks for cycles among what the command makes (100,000
    # rows of ps --json are millions of objects: a tenth of its time went to that)
    gc.freeze()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # told with the command's own usage, as argparse's top level would not
        told: argparse.ArgumentParser = getattr(args, "parser_", parser)
        told.error(f"unrecognized arguments: {' '.join(extra)}")
    args.json = getattr(args, "json", False)
    _say_store_progress()
    try:
        if getattr(args, "host", None):  # for this process and every one it starts (an engine's steps)
            os.environ[hosts.ENV] = hosts.check(args.host)
        if args.command is None:
            return asyncio.run(monitor.monitor(args))
        return asyncio.run(run(args.command_, args))
    except (UsageError, Malformed) as exc:
        failed: argparse.ArgumentParser = getattr(args, "parser_", parser)  # the command's own usage
        failed.error(printable(str(exc), lines=False))
    except ProcessionError as exc:
        error(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
