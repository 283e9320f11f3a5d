"""The web face as a phone meets it: the page drawn, a request reaching the phone (a push, the
page), a tap answering it, and what the server holds for each open page.

    python bench/web.py [--tiny] [--reps N] [--only openai,claude] [--json-out FILE]

(7 rounds of each runner by default, ~2 min on 2 cores; ``--tiny``: one, ~15 s for ``openai``.)

Each round, for each runner in turn: a new workspace, a real ``procession web --pair phone``
process (the CLI's own command), a real engine in this process pushing to an ntfy server of the
tests' own (``support.ntfy``) as ``[notify] push``, ``web`` and ``buttons`` configure it, and
Chromium (headless, driven by Playwright) paired from the printed link, as a person pairs a phone.
The model is the tests' scripted server; a session whose permissions are ``ask`` is sent a turn
whose model calls a tool that writes: Claude Code's ``Bash`` (``date +%s.%N > stamp``, asked
through its ``--permission-prompt-tool``) or the ``openai:`` loop's folder ``write`` (asked in
the engine). Five figures:

- *first paint*: a new tab of the paired browser loading ``/``: to its first contentful paint
  (the Performance API's ``paint`` entry), and to its first state drawn (``#live`` reading
  "live", seen by a MutationObserver in the page), both from the navigation's start
  (``performance.now()``);
- *request -> push*: the scripted server's receipt of the turn whose reply calls the tool (as
  ``asking.py`` measures *request -> W*) to the ntfy server's receipt of the "waits for you"
  push: its handler is wrapped here (``support.ntfy`` itself is untouched) to stamp
  ``time.monotonic()`` as each push arrives, the same clock as the model server's stamp. The
  engine's notifier sends it at its first look after the ask (bench/README.md says when that is);
- *request -> page*: the same receipt to the request's card (``li[data-request]``) put in the
  page, stamped ``Date.now()`` by a MutationObserver in the page: wall clock, so the model
  server's monotonic stamp is taken to wall clock here by the offset of ``time.time()`` to
  ``time.monotonic()`` read at that moment (one machine, one clock). The page is drawn at its
  next frame after that. The stream looks for a change once a second (``web.app.TICK_S``), so
  where in that second the ask falls is most of this figure: round n of N waits (n + 1/2)/N of
  a second more before it activates the session, spreading the asks evenly over the second
  (else each round's ask falls at the same part of it, and the median is that part);
- *tap Allow -> tool ran*: the click on "Allow once" (``Date.now()`` of the click event, in a
  listener of the page's) to the tool's work: for Claude Code, the time its ``date`` wrote; for
  the ``openai:`` loop, the written file seen (``time.time()``, polled every 5 ms). Wall clock
  on both sides;
- *server memory*: the RSS (psutil) of the ``procession web`` process with the one paired page
  open (once the run ended), and with 10 open (9 more tabs, each its own event stream), a
  second after the last drew its state. Each of the 9 is a browser context of its own holding
  the device's cookie (as 9 more phones): one browser keeps at most 6 connections to a host
  over HTTP/1.1, and each page holds one for its stream, so a 7th tab of one browser would
  wait for a connection forever.

First paint and memory do not depend on the runner: their samples are pooled over the rounds of
every runner measured. A runner whose CLI is missing is skipped with a line saying so (an
error where ``PROCESSION_REQUIRE_AGENT_CLIS=1``); without Playwright or Chromium nothing is
measured (exit 1).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from report import Results, engine_running, environment, publish  # noqa: E402
from support.agent_clis import SANDBOXES, AgentCliMissing, find_cli, session_env  # noqa: E402
from support.models import ModelServer, say, shell, tool_call  # noqa: E402
from support.ntfy import Ntfy  # noqa: E402
from support.wait import HANG_S  # noqa: E402

RUNNERS = ("openai", "claude")
#: The runners that are an agent CLI (the rest is the engine's own ``openai:`` loop).
CLIS = ("claude",)
#: Pages open for the second memory figure.
PAGES = 10
#: How often the page's event stream looks for a change (``procession.web.app.TICK_S``).
TICK_S = 1.0
MB = 1024 * 1024

#: Put in every page before its own script: when its state was first drawn (``performance.now()``),
#: when each request's card was put in (``Date.now()``, by request id) and each button clicked.
WATCH = """
(() => {
  const seen = {live: null, cards: {}, clicks: []};
  window.__bench = seen;
  const look = () => {
    const live = document.getElementById("live");
    if (seen.live === null && live && live.textContent === "live") seen.live = performance.now();
    for (const li of document.querySelectorAll("li[data-request]")) {
      if (!(li.dataset.request in seen.cards)) seen.cards[li.dataset.request] = Date.now();
    }
  };
  new MutationObserver(look).observe(document, {subtree: true, childList: true, characterData: true});
  document.addEventListener("click", (e) => {
    const b = e.target.closest && e.target.closest("button");
    if (b) seen.clicks.push([b.textContent, Date.now()]);
  }, true);
})();
"""
LIVE = "() => window.__bench.live !== null"
PAINTED = "() => window.__bench.live !== null && performance.getEntriesByName('first-contentful-paint').length > 0"
PAINT = "() => [performance.getEntriesByName('first-contentful-paint')[0].startTime, window.__bench.live]"


class Served:
    """``procession web --pair phone`` on the workspace: its process, address and pairing link."""

    def __init__(self, db: Path) -> None:
        self.log = db.with_name("web.log")  # its stderr: a file, which no unread pipe can stop
        with self.log.open("w") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "procession", "--db", str(db), "web", "--port", "0",
                                          "--pair", "phone"], stdout=subprocess.PIPE, stderr=log, text=True)
        assert self.proc.stdout is not None
        self.link = self.address = ""
        for line in self.proc.stdout:
            if "/pair#" in line:
                self.link = line.strip()
            if line.startswith("procession web: serving "):
                self.address = line.split()[3]
                break
        if not self.address or not self.link:
            self.proc.wait()
            raise RuntimeError(f"procession web did not start: {self.log.read_text()[-2000:]}")

    def rss_mb(self) -> float:
        import psutil

        return float(psutil.Process(self.proc.pid).memory_info().rss) / MB

    def connections(self) -> int:
        """The TCP connections the server holds open: each page's event stream, and the idle ones
        Chromium keeps for its next fetch."""
        import psutil

        return sum(c.status == psutil.CONN_ESTABLISHED for c in psutil.Process(self.proc.pid).net_connections("tcp"))

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Phone(Ntfy):
    """The tests' ntfy server, each push it takes stamped (``at``: ``time.monotonic()`` as its
    handler starts, the request read up to its body) by a handler wrapped around its own."""

    def __init__(self) -> None:
        super().__init__()
        own, got, lock = self.server.RequestHandlerClass, self.got, threading.Lock()

        class Stamped(own):  # type: ignore[valid-type, misc]
            def do_POST(self) -> None:
                at = time.monotonic()
                with lock:
                    super().do_POST()
                    got[-1]["at"] = at

        self.server.RequestHandlerClass = Stamped

    def waiting(self) -> dict[str, Any] | None:
        return next((p for p in list(self.got) if "waits" in str(p.get("title")) and "at" in p), None)


async def polled(predicate: Any, what: str, interval: float = 0.005) -> Any:
    deadline = time.monotonic() + HANG_S
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(interval)
    raise TimeoutError(f"no {what} within {HANG_S:g} s")


async def one(runner: str, root: Path, server: ModelServer, env: tuple[dict[str, str], list[str]],
              browser: Any, phase: float) -> dict[str, float]:
    """One round of ``runner``: every figure once; the ask made ``phase`` (of a second) later
    than it would be."""
    from procession import Workspace
    from procession.engine.notify import load

    db, work = root / "ws.db", root / "work"
    work.mkdir(parents=True, exist_ok=True)
    figures: dict[str, float] = {}
    phone = Phone()
    served = None
    async with await Workspace.open(db) as ws:
        if runner in CLIS:
            server.script.add(shell("date +%s.%N > stamp"), say("done"))
            sid = (await ws.spawn("asks", "bench", runner="claude:", cwd=str(work), env=env[0], passed=env[1],
                                  permissions="ask")).sid
        else:
            server.script.add(tool_call("work_write", {"path": "stamp", "content": "x"}), say("done"))
            sid = (await ws.spawn("asks", "bench", runner=f"openai:m@{server.url_v1}", cwd=str(root),
                                  permissions="ask")).sid
            await ws.bind(sid, "folder", str(work), mode="rw")
        await ws.send(sid, "write the stamp")
        try:
            served = Served(db)
            config = root / "config.toml"
            config.write_text(f'[notify]\npush = ["{phone.url}"]\nweb = "{served.address}/"\nbuttons = true\n',
                              encoding="utf-8")
            settings = load(config)
            if settings.problems:
                raise RuntimeError("; ".join(settings.problems))
            context = await browser.new_context(viewport={"width": 390, "height": 844})
            await context.add_init_script(WATCH)
            page = await context.new_page()
            await page.goto(served.link)
            await page.get_by_role("button", name="Pair this device").click()
            await page.wait_for_url(f"{served.address}/")
            await page.wait_for_function(LIVE)

            tab = await context.new_page()  # first paint: a new tab of the paired browser
            await tab.goto(f"{served.address}/", wait_until="commit")
            await tab.wait_for_function(PAINTED, polling=50, timeout=HANG_S * 1000)
            fcp, live = await tab.evaluate(PAINT)
            figures["first_paint"], figures["first_state"] = fcp / 1000, live / 1000
            await tab.close()

            async with engine_running(db, notify=settings):
                # the stream's tick (and the engine's heartbeat) keep their phase from round to
                # round: the ask is made at a part of that second of its own in each round
                await asyncio.sleep(phase * TICK_S)
                seen = len(server.requests)
                await ws.activate(sid)
                card = page.locator("li[data-request]")
                await card.wait_for(timeout=HANG_S * 1000)
                offset = time.time() - time.monotonic()  # wall clock minus monotonic, now
                request_id = await card.get_attribute("data-request")
                shown = (await page.evaluate("window.__bench.cards"))[request_id] / 1000
                asked = [r for r in server.requests[seen:] if r.kind == "turn" and r.sent][0]
                figures["request_to_page"] = shown - (asked.at + offset)
                pushed = await polled(phone.waiting, "push")
                figures["request_to_push"] = pushed["at"] - asked.at
                await page.get_by_role("button", name="Allow once").click()
                stamp = work / "stamp"
                seen_at = await polled(lambda: stamp.exists() and stamp.stat().st_size and time.time(), "stamp")
                ran = float(stamp.read_text()) if runner in CLIS else seen_at
                clicked = [at for label, at in await page.evaluate("window.__bench.clicks") if label == "Allow once"]
                figures["allow_to_tool"] = ran - clicked[-1] / 1000

                async def ended() -> bool:
                    runs = await ws.runs(sid)
                    return bool(runs) and all(r.ended for r in runs)

                while not await ended():
                    await asyncio.sleep(0.01)
            figures["rss_1_page"] = served.rss_mb()  # its page open since it was paired
            state = await context.storage_state()  # the device's cookie, for the other tabs
            others = []
            for _ in range(PAGES - 1):  # each in a context of its own: Chromium keeps 6 connections per host
                other = await browser.new_context(viewport={"width": 390, "height": 844}, storage_state=state)
                await other.add_init_script(WATCH)
                opened = await other.new_page()
                await opened.goto(f"{served.address}/")
                others.append((other, opened))
            for _, opened in others:
                await opened.wait_for_function(LIVE, timeout=HANG_S * 1000)
            await asyncio.sleep(TICK_S)  # every stream past its first tick
            figures["rss_10_pages"] = served.rss_mb()
            figures["connections"] = served.connections()
            for other, _ in others:
                await other.close()
            await context.close()
        finally:
            if served is not None:
                served.stop()
            phone.close()
    return figures


#: Each figure's key (prefixed by the runner's name unless pooled), wording and unit.
MEASURES = {
    "first_paint": ("a new tab loading / -> first contentful paint", "s"),
    "first_state": ("a new tab loading / -> its first state drawn", "s"),
    "request_to_push": ("the model's tool call -> the push at the ntfy server", "s"),
    "request_to_page": ("the model's tool call -> its card in the open page", "s"),
    "allow_to_tool": ("tap Allow once -> the tool ran", "s"),
    "rss_1_page": ("procession web's RSS, 1 page open", "MB"),
    "rss_10_pages": (f"procession web's RSS, {PAGES} pages open", "MB"),
}
POOLED = ("first_paint", "first_state", "rss_1_page", "rss_10_pages", "connections")


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


async def measure(runners: list[str], reps: int, tmp: Path) -> dict[str, dict[str, list[float]]]:
    from playwright.async_api import async_playwright

    found: dict[str, dict[str, list[float]]] = {}
    async with async_playwright() as play:
        browser = await play.chromium.launch(executable_path=chromium(), headless=True, args=["--no-sandbox"])
        try:
            for n in range(reps):  # the runners take turns, so neither gets the quieter moments
                for runner in runners:
                    env: tuple[dict[str, str], list[str]] = ({}, [])
                    with ModelServer() as server:
                        root = tmp / f"{runner}-{n}"
                        root.mkdir()
                        if runner in CLIS:
                            sandbox = SANDBOXES[runner](find_cli(runner), server, root / "sandbox")
                            env = session_env([sandbox], os.environ.__setitem__)
                        figures = await one(runner, root, server, env, browser, (n + 0.5) / reps)
                    for key, value in figures.items():
                        found.setdefault("all" if key in POOLED else runner, {}).setdefault(key, []).append(value)
        finally:
            await browser.close()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="one round of each, for the suite")
    parser.add_argument("--reps", type=int, help="rounds of each runner (default 7; --tiny 1)")
    parser.add_argument("--only", default=",".join(RUNNERS), help="the runners, of " + ", ".join(RUNNERS))
    parser.add_argument("--json-out")
    args = parser.parse_args()
    reps = args.reps or (1 if args.tiny else 7)
    runners = [r for r in args.only.split(",") if r]
    if unknown := set(runners) - set(RUNNERS):
        parser.error(f"--only: no runner {', '.join(sorted(unknown))} (of {', '.join(RUNNERS)})")
    try:
        import playwright  # noqa: F401
    except ImportError:
        raise SystemExit("web: Playwright is not installed (pip install playwright); nothing measured") from None
    if chromium() is None:
        raise SystemExit("web: Chromium is not installed (Debian: apt-get install chromium); nothing measured")
    missing = []
    for runner in [r for r in runners if r in CLIS]:
        try:
            find_cli(runner)
        except AgentCliMissing as exc:
            if os.environ.get("PROCESSION_REQUIRE_AGENT_CLIS") == "1":
                raise SystemExit(f"web: PROCESSION_REQUIRE_AGENT_CLIS=1 and {runner}: {exc}") from None
            print(f"web: {runner} skipped: {exc}", file=sys.stderr, flush=True)
            missing.append(f"{runner}: {exc}")
            runners.remove(runner)
    results = Results()
    with tempfile.TemporaryDirectory(prefix="procession-web-") as tmp:
        found = asyncio.run(measure(runners, reps, Path(tmp)))
        connections = found.get("all", {}).pop("connections", [])
        for runner, figures in sorted(found.items(), key=lambda kv: kv[0] != "all"):
            for key, runs in figures.items():
                said, unit = MEASURES[key]
                if runner == "all":
                    row = results.record(key, said, f"{len(runs)} rounds", runs, unit=unit)
                    if key == "rss_10_pages":
                        row["connections"] = connections  # the server's, each time: 10 streams and idle ones
                else:
                    results.record(f"{runner}_{key}", f"{runner}: {said}", f"{len(runs)} rounds", runs, unit=unit)
        report = {**results.summary(), "mode": "tiny" if args.tiny else "full", "reps": reps, "pages": PAGES,
                  "missing": missing, "environment": environment(Path(tmp))}
        publish(results.rows, report, args.json_out)
    if not any(k != "all" for k in found):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
