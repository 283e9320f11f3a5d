"""Make the README's pictures of the monitor: ``python screenshots/generate.py``.

Builds the demo workspace in a temporary folder at a fixed clock, opens the monitor on it
headless (no engine: nothing moves while the pictures are taken) and writes one SVG per
view beside this script, plus a PNG of each when ``rsvg-convert`` (Debian: librsvg2-bin)
is installed. Runs in a few seconds and gives the same pictures on every machine: the
clock, the time zone and the token counter are pinned.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

FIXED = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC
SIZE = (160, 45)
OUT = Path(__file__).resolve().parent

os.environ["TZ"] = "UTC"
os.environ["PROCESSION_HOST"] = "devbox"  # the sessions' host, not the name of the machine that made the pictures
time.tzset()
for _name in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
    os.environ.pop(_name, None)

from procession import Workspace  # noqa: E402
from procession.cli import demo  # noqa: E402
from procession.tui.app import ProcessionApp  # noqa: E402
from procession.tui.attention import Attention  # noqa: E402
from procession.tui.config import Config  # noqa: E402
from procession.tui.detail import Detail  # noqa: E402
from procession.tui.dialogs import Conflicts, Form  # noqa: E402

PAYROLL, SCREENING, APIDOCS, REVIEW, STRICT = 1, 2, 5, 6, 7
Steps = Callable[[Any, ProcessionApp], Awaitable[None]]


async def _until(pilot: Any, predicate: Callable[[], bool]) -> None:
    for _ in range(250):
        if predicate():
            return
        await pilot.pause(0.02)
    raise SystemExit("screenshots: a view did not appear")


async def table(pilot: Any, app: ProcessionApp) -> None:
    for sid in (SCREENING, APIDOCS):  # two tagged rows, to show the marks
        app.table.move_to(sid)
        await pilot.press("space")
    app.table.move_to(REVIEW)


async def tree(pilot: Any, app: ProcessionApp) -> None:
    app.table.move_to(STRICT)
    await pilot.press("t")


async def detail(pilot: Any, app: ProcessionApp) -> None:
    app.table.move_to(STRICT)
    await pilot.press("enter")
    await _until(pilot, lambda: isinstance(app.screen, Detail) and app.screen.rev >= 0)


async def merge(pilot: Any, app: ProcessionApp) -> None:
    app.table.move_to(STRICT)
    await pilot.press("m")
    await _until(pilot, lambda: isinstance(app.screen, Form))
    await pilot.press("enter")
    await _until(pilot, lambda: isinstance(app.screen, Conflicts))


async def light(pilot: Any, app: ProcessionApp) -> None:
    app.table.move_to(REVIEW)


async def search(pilot: Any, app: ProcessionApp) -> None:
    """Ctrl+F: what was said, in every session, as it is typed."""
    from textual.widgets import Input

    from procession.tui.said import Said

    await pilot.press("ctrl+f")
    await _until(pilot, lambda: isinstance(app.screen, Said))
    app.screen.query_one("#said-query", Input).value = "payroll"
    await _until(pilot, lambda: bool(getattr(app.screen, "found", None)))


async def attention(pilot: Any, app: ProcessionApp) -> None:
    """Two sessions whose agents ask (a run started as the engine starts one, its agent asking
    as an agent does), then the queue of what needs you."""
    from procession.engine.ledger import Ledger

    ledger = Ledger(app.ws.store, actor="engine")
    await ledger.acquire("screenshots", 1, None)
    for sid, tool, call in ((PAYROLL, "Bash", {"command": "git push origin main"}),
                            (SCREENING, "WebFetch", {"url": "https://jobs.example.com/applicants.csv"})):
        await ledger.activate(sid)
        await ledger.start_run(sid, runner=(await ledger.info(sid)).runner, engine="screenshots")
        await ledger.as_actor("agent").ask(sid, tool, call)
    await ledger.release("screenshots")
    await app.refresh_data()
    await pilot.press("W")
    await _until(pilot, lambda: isinstance(app.screen, Attention))


VIEWS: dict[str, tuple[Steps, dict[str, Any]]] = {
    "table": (table, {}),
    "tree": (tree, {}),
    "detail": (detail, {}),
    "merge-conflict": (merge, {}),
    "light-theme": (light, {"theme": "paper"}),
    "search": (search, {}),
    "attention": (attention, {}),  # last: it leaves two sessions waiting
}


async def build(folder: Path) -> Path:
    os.chdir("/")  # the demo's sessions without a folder of their own show where it was built: nowhere in particular
    made = await demo.build(folder / "demo.db", clock=lambda: FIXED)
    return made.db


async def shoot(db: Path, folder: Path, name: str, steps: Steps, options: dict[str, Any]) -> Path:
    async with await Workspace.open(db, actor="tui") as ws:
        app = ProcessionApp(ws, engine=False, clock=lambda: FIXED, config=Config(path=None),
                            user_themes=folder / "themes", **options)
        async with app.run_test(size=SIZE) as pilot:
            await _until(pilot, lambda: bool(app.table.keys))
            await steps(pilot, app)
            await pilot.pause()
            await pilot.wait_for_scheduled_animations()
            await pilot.pause()
            return Path(app.save_screenshot(f"{name}.svg", str(OUT)))


def png(svg: Path) -> Path | None:
    """The SVG as a PNG. Textual writes runs of spaces as no-break spaces, which rsvg drops
    at the start of a text element (columns would slide left): hand it plain spaces, kept."""
    tool = shutil.which("rsvg-convert")
    if tool is None:
        return None
    text = svg.read_text(encoding="utf-8").replace("&#160;", " ")
    text = re.sub(r"<svg ", '<svg xml:space="preserve" ', text, count=1)
    out = svg.with_suffix(".png")
    subprocess.run([tool, "-o", str(out)], input=text.encode(), check=True)
    return out


async def main() -> int:
    with tempfile.TemporaryDirectory(prefix="procession-screenshots-") as tmp:
        folder = Path(tmp)
        db = await build(folder)
        for name, (steps, options) in VIEWS.items():
            svg = await shoot(db, folder, name, steps, options)
            made = png(svg)
            print(f"wrote {svg.relative_to(OUT.parent)}" + (f" and {made.name}" if made else ""))
    if not shutil.which("rsvg-convert"):
        print("rsvg-convert not found (apt install librsvg2-bin): SVGs only", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
