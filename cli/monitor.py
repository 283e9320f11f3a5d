"""The commands that open the monitor: ``procession`` alone, and ``procession demo``.

The monitor is imported only here, and only when it opens, so that no other command pays
for Textual."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from procession.model.errors import WorkspaceError

from .registry import PROG, arg, command
from .terminal import emit


def needs_terminal() -> str | None:
    """Why the monitor cannot open here, or None: it draws on a terminal and reads keys from one."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return (f"the monitor needs a terminal (standard input and output are not one); for scripts use"
                f" `{PROG} ps`, `{PROG} show SID` and the other commands, with --json")
    return None


async def open_monitor(db: Path | str, args: argparse.Namespace) -> int:
    """``--engine`` is passed on only when given: unsaid, the monitor decides by the workspace's
    kind (``procession.tui.host.runs_engine``)."""
    reason = needs_terminal()
    if reason:
        print(f"{PROG}: {reason}", file=sys.stderr)
        return 2
    from procession.tui.app import run_monitor

    return await run_monitor(db, readonly=args.readonly, theme=args.theme, engine=args.engine)


async def monitor(args: argparse.Namespace) -> int:
    """The monitor on the workspace given (which must exist), or on the default one (made if new)."""
    from procession.store import default_target, is_url, workspace_path

    explicit = getattr(args, "db", None) or os.environ.get("PROCESSION_DB")
    if explicit and is_url(explicit):
        return await open_monitor(explicit, args)  # a database: opening it says what is wrong
    db = workspace_path(explicit) if explicit else Path(default_target())
    if explicit and not db.exists():
        raise WorkspaceError(f"no workspace at {db}: spawn a session there to make one, or try `{PROG} demo`")
    return await open_monitor(db, args)


def demo_path() -> Path:
    from platformdirs import user_data_dir

    return Path(user_data_dir("procession")) / "demo.db"


@command("demo", "build the demo workspace (once) and open the monitor on it", workspace=False, args=[
    arg("--fresh", action="store_true", help="rebuild the demo from scratch"),
    arg("--no-monitor", action="store_true", help="only build it"),
])
async def demo(args: argparse.Namespace) -> int:
    from . import demo as demo_workspace

    named = getattr(args, "db", None)
    with demo_workspace.own(Path(named).expanduser() if named else demo_path(), named=bool(named)) as db:
        made = await demo_workspace.build(db, fresh=args.fresh)
        if args.no_monitor or args.json:
            emit(args, {"db": str(made.db), "folder": str(made.folder), "sessions": made.sessions},
                 f"demo workspace {made.db}\nits files: {made.folder}\nopen it: {PROG} --db {made.db}"
                 f" (or {PROG} demo, which also serves the demo's model)")
            return 0
        reason = needs_terminal()
        if reason:
            print(f"{PROG}: {reason}", file=sys.stderr)
            return 2
        from .demo_model import DemoModel

        with DemoModel() as model:  # the demo's own model, for as long as the monitor is open
            await demo_workspace.with_model(made.db, model.url)
            return await open_monitor(made.db, args)
