"""The demo workspace: the mission's own stories, ready to watch and steer.

An HR agent owns three narrow sessions (monthly payroll, recruiting screening, social
insurance filing); a docs agent regenerates an API summary after each commit that touches
its ``src/``; a review agent has a session with two forks, one of which disagrees with its
parent on a memory key, so merging it shows a conflict to resolve. The payroll and API-docs
sessions run the real example runners (``procession.examples``) on files copied into a
folder beside the workspace, the API docs in a git repository made there: touch
``rates.csv``, or commit a change under ``src/``, and the session wakes. Nothing needs an
API key. Without git, the API-docs session watches ``src/`` instead. While ``procession demo``
runs, a "payroll questions" session is an ``openai:`` agent loop on the demo's own scripted
model (``demo_model``): activate it to watch it read its two bound tables, then wait for you
(W: its permissions are ``ask``) before it writes its answer into ``answer.md``.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from procession.calls import Workspace, gitrepo
from procession.model.errors import ProcessionError, WorkspaceError
from procession.store import Clock, meta

from . import demo_model

MARK = "demo"
#: The session on the demo's own model.
QUESTIONS = "payroll questions"
#: The goal of the session on the demo's model: its detail view says plainly that its model is
#: a script, lest its tidy answers be taken for a real model's.
QUESTIONS_GOAL = ("Answer from the tables, with the tool calls to show for it. Its model is the demo's own"
                  " scripted one (procession demo), not a real model: it answers this one question, by script.")


@dataclass(slots=True, frozen=True)
class Demo:
    db: Path
    folder: Path
    sessions: dict[str, int]


def files_folder(db: Path) -> Path:
    return db.with_name(f"{db.stem}-files")


#: The demo repository's one commit, made the same way everywhere (no user config, hook or
#: signing applies): its id is the same on every machine for the same clock.
_DEMO_GIT = {"GIT_AUTHOR_NAME": "Procession demo", "GIT_AUTHOR_EMAIL": "demo@procession.invalid",
             "GIT_COMMITTER_NAME": "Procession demo", "GIT_COMMITTER_EMAIL": "demo@procession.invalid",
             "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def _repository(folder: Path, when: float) -> bool:
    """Make ``folder`` a git repository with everything in it committed; False without git."""
    (folder / ".gitignore").write_text("# written by the api docs session at each run\nAPI.md\n__pycache__/\n")
    stamp = f"@{int(when)} +0000"
    env = {**_DEMO_GIT, "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
    try:
        gitrepo.run(str(folder), "init", "-q", "-b", "main", env=env)
        gitrepo.run(str(folder), "add", "-A", env=env)
        gitrepo.run(str(folder), "commit", "-q", "--no-verify", "-m", "The ledger package and its API summary",
                    env=env)
    except gitrepo.GitError:
        shutil.rmtree(folder / ".git", ignore_errors=True)
        return False
    return True


def _copy_examples(folder: Path) -> None:
    source = resources.files("procession.examples")
    for name in ("payroll", "apidocs"):
        with resources.as_file(source / name) as path:
            shutil.copytree(path, folder / name, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


@contextlib.contextmanager
def own(db: Path, *, named: bool) -> Iterator[Path]:
    """A demo workspace this demo alone serves, held until the block ends (a lock beside it):
    ``db``, or while another ``procession demo`` serves that one, the first of ``demo-2.db``,
    ``demo-3.db``... that none serves; ``named`` (given with ``--db``): refused instead. Its
    files and its session on the demo's model are then this demo's own: a second demo on the
    same workspace pointed that session at its own model server, and broke it for the first
    when it quit and took its server with it."""
    db.parent.mkdir(parents=True, exist_ok=True)
    for n in itertools.count(1):
        path = db if n == 1 else db.with_name(f"{db.stem}-{n}{db.suffix}")
        fd = os.open(path.with_name(f"{path.name}.demo-lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if named:
                raise WorkspaceError(f"another procession demo serves {path}: give another --db") from None
            continue
        try:
            yield path
        finally:
            os.close(fd)
        return


async def is_demo(db: Path) -> bool:
    if not db.exists():
        return False
    ws = await Workspace.open(db, create=False)
    try:
        async with ws.store.snapshot() as tx:
            return bool(await meta.get(tx, MARK))
    finally:
        await ws.close()


async def build(db: Path, *, fresh: bool = False, clock: Clock = time.time) -> Demo:
    """Make the demo workspace at ``db`` (and its files beside it), unless it is there already."""
    folder = files_folder(db)
    if db.exists():
        if not await is_demo(db):
            raise WorkspaceError(f"{db} exists and is not a demo workspace; give another --db")
        if not fresh:
            ws = await Workspace.open(db)
            try:
                return Demo(db, folder, {s.name: s.id for s in await ws.ps(all=True)})
            finally:
                await ws.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    _copy_examples(folder)
    git = _repository(folder / "apidocs", clock())
    ws = await Workspace.open(db, clock=clock)
    try:
        sessions = await _populate(ws, folder, git)
        async with ws.store.tx() as tx:
            await meta.put(tx, MARK, str(folder))
    finally:
        await ws.close()
    return Demo(db, folder, sessions)


async def _populate(ws: Workspace, folder: Path, git: bool) -> dict[str, int]:
    # The example runners need only Python's standard library, so any python3 will do; they
    # run in their bound folder, where their scripts and data files are.
    s: dict[str, int] = {}

    payroll_dir = folder / "payroll"
    s["monthly payroll"] = sid = (await ws.spawn(
        "monthly payroll", "hr", priority=5, window=4_000, cwd=str(payroll_dir),
        system="You compute the monthly payroll from the employee list and the grade rates. Be exact.",
        goal="Pay everyone correctly on the 1st; recompute when the rates change.",
        runner="command:python3 payroll.py",
    )).sid
    await ws.bind(sid, "folder", str(payroll_dir))
    await ws.bind(sid, "file", "rates.csv", mode="ro")
    await ws.bind(sid, "file", "employees.csv", mode="ro")
    await ws.trigger_add(sid, "cron", ["0 9 1 * *"])
    await ws.trigger_add(sid, "watch", ["rates.csv"], debounce_ms=300)
    await ws.send_many(sid, _conversation(PAYROLL, 12))
    await ws.memory_set(sid, "currency", "EUR")

    s["recruiting screening"] = sid = (await ws.spawn(
        "recruiting screening", "hr", priority=0, window=8_000,
        system="You screen applications for the open backend role against the job profile.",
        goal="Shortlist five candidates by Friday.", runner="builtin:sleep:4",
    )).sid
    await ws.send_many(sid, _conversation(SCREENING, 20))
    await ws.compress(sid, keep_last=40)
    await ws.trigger_add(sid, "every", ["30s"])
    await ws.trigger_add(sid, "inbox")

    s["social insurance filing"] = sid = (await ws.spawn(
        "social insurance filing", "hr", priority=2, window=4_000,
        system="You prepare the quarterly social insurance filing.", goal="File before the 15th.",
    )).sid
    await ws.send_many(sid, _conversation(FILING, 12))
    await ws.suspend(sid)

    s["quarterly audit"] = sid = (await ws.spawn(
        "quarterly audit", "hr", window=4_000, system="You audited Q3 payroll records.",
        goal="Q3 audit (closed).",
    )).sid
    await ws.send_many(sid, _conversation(AUDIT, 1))
    await ws.cancel(sid)

    docs_dir = folder / "apidocs"
    s["api docs"] = sid = (await ws.spawn(
        "api docs", "docs", priority=3, window=4_000, cwd=str(docs_dir),
        system="You keep API.md in step with the code under src/.", goal="API.md matches src/ at every commit.",
        runner="command:python3 apidocs.py",
    )).sid
    await ws.bind(sid, "folder", str(docs_dir))
    if git:
        await ws.trigger_add(sid, "commit", paths=["src/**"])
    else:
        await ws.trigger_add(sid, "watch", ["src"], debounce_ms=300)
    await ws.send_many(sid, _conversation(APIDOCS, 6))

    s["design review"] = sid = (await ws.spawn(
        "design review", "review", priority=1, window=6_000,
        system="You review the session-engine design for risks.", goal="A verdict on the merge semantics.",
    )).sid
    await ws.send_many(sid, _conversation(REVIEW, 40))
    await ws.memory_set(sid, "verdict", "undecided")
    await ws.memory_set(sid, "risks", ["lost updates", "merge conflicts"])
    s["review: strict"] = strict = (await ws.fork(sid, "review: strict")).sid
    s["review: lenient"] = lenient = (await ws.fork(sid, "review: lenient", at=12)).sid
    await ws.send_many(strict, [{"role": "assistant", "author": "runner",
                                 "content": "Strict reading: every conflict must stop the merge until a person decides."}])
    await ws.memory_set(strict, "verdict", "block until resolved")
    await ws.send_many(lenient, [{"role": "assistant", "author": "runner",
                                  "content": "Lenient reading: last writer wins is acceptable for scratch keys."}])
    await ws.memory_set(sid, "verdict", "ship with conflict reports")
    await ws.memory_set(lenient, "owner", "review team")

    return s


async def with_model(db: Path, url: str) -> int:
    """The demo's session on its own model, made on first use and pointed at the demo model
    serving at ``url`` (its port is new each time); returns its SID. It stays out of
    ``build``: without its model it could only fail."""
    folder = files_folder(db) / "payroll"
    runner = f"openai:{demo_model.MODEL}@{url}"
    ws = await Workspace.open(db)
    try:
        found = [s for s in await ws.ps(all=True) if s.name == QUESTIONS]
        if found:
            with contextlib.suppress(ProcessionError):  # busy (another engine runs it): left as it is
                if found[0].runner != runner:
                    await ws.migrate(found[0].id, runner)
                if found[0].goal != QUESTIONS_GOAL:  # a demo made before its goal said so
                    await ws.set(found[0].id, goal=QUESTIONS_GOAL)
            return found[0].id
        sid = (await ws.spawn(
            QUESTIONS, "hr", window=4_000, cwd=str(folder), runner=runner, permissions="ask",
            system="You answer questions about the payroll from its tables. Read them; never guess a number.",
            goal=QUESTIONS_GOAL,
        )).sid
        await ws.bind(sid, "file", str(folder / "rates.csv"), mode="ro")
        await ws.bind(sid, "file", str(folder / "employees.csv"), mode="ro")
        (folder / "answer.md").touch()
        await ws.bind(sid, "file", str(folder / "answer.md"), mode="rw")
        await ws.send(sid, "Which grade has the highest hourly rate, and who is on it?")
        return sid
    finally:
        await ws.close()


def _conversation(lines: list[tuple[str, str]], repeat: int) -> list[dict[str, str]]:
    """Rounds of a conversation; the replies are the session's own (its runner's), not the user's."""
    out = []
    for round_ in range(repeat):
        for role, text in lines:
            message = {"role": role, "content": text if round_ == 0 else f"{text} (round {round_ + 1})"}
            if role == "assistant":
                message["author"] = "runner"
            out.append(message)
    return out


PAYROLL = [
    ("user", "Compute the October payroll. Rates are in rates.csv, hours in employees.csv."),
    ("assistant", "Payroll 2026-10 for 5 employees: gross 27,214.00, social insurance 3,946.03, tax 4,522.13."),
    ("user", "Grade B's hourly rate goes to 35.50 from November; recompute when the table changes."),
    ("assistant", "Noted. I watch rates.csv and recompute the current month when it changes."),
]
SCREENING = [
    ("user", "New application: backend engineer, 6 years of Go and PostgreSQL, remote."),
    ("assistant", "Strong match on the database requirements; asks for remote work, which the role allows."),
    ("user", "New application: junior developer, bootcamp graduate, strong portfolio of small web apps."),
    ("assistant", "Below the experience bar for this role; suggest the junior opening in January instead."),
    ("user", "Shortlist so far?"),
    ("assistant", "Two candidates shortlisted; three more needed by Friday."),
]
FILING = [
    ("user", "Collect the Q4 headcount and contribution bases for the filing."),
    ("assistant", "Headcount 5; contribution bases drafted from the October payroll. Waiting for November."),
]
AUDIT = [
    ("user", "Audit the Q3 payroll against the bank transfers."),
    ("assistant", "All 15 transfers match the payroll lines. No findings. Closing the audit."),
]
APIDOCS = [
    ("user", "Keep API.md in step with src/ledger."),
    ("assistant", "API.md regenerated: 3 modules, 7 public names."),
]
REVIEW = [
    ("user", "Review the merge semantics: three-way on working memory, conflicts reported."),
    ("assistant", "The base is the common ancestor at the fork point, so one-sided changes merge cleanly."),
    ("user", "What happens when both sides change the same key?"),
    ("assistant", "A conflict is reported with base, ours and theirs; nothing is applied until it is resolved."),
]
