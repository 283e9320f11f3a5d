"""Shared fixtures: real workspace files in a temporary folder, a fixed clock, the real CLI."""

from __future__ import annotations

import contextlib

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any
from pathlib import Path

import pytest

from procession import Workspace
from support.stores import BACKENDS, backend_of
from support.wait import HANG_S, slow_factor, until  # noqa: F401  (tests import them from here)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """pytest-timeout's per-test limit is a hang guard, as `HANG_S` is: scaled by the same
    ``PROCESSION_TEST_SLOW`` factor (after pytest-timeout has read it)."""
    if getattr(config, "_env_timeout", None):
        config._env_timeout *= slow_factor()  # type: ignore[attr-defined]


class Clock:
    """A clock the test moves by hand: timestamps in the store are predictable."""

    def __init__(self, start: float = 1_767_225_600.0) -> None:  # 2026-01-01 00:00:00 UTC
        self.now = start

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


@pytest.fixture(autouse=True)
def in_its_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test works in a folder of its own, as a user runs procession in a project: a
    session spawned without a folder works there, and its confined runs may write there."""
    monkeypatch.chdir(tmp_path)


#: The stores a module runs its tests on, with ``pytestmark = STORES`` (the call suite, which
#: every backend passes: ``support.stores``): an SQLite file and a PostgreSQL database of a
#: real server the tests start (``support.postgres``).
STORES = pytest.mark.parametrize("store_kind", list(BACKENDS), indirect=True)


@pytest.fixture
def store_kind(request: pytest.FixtureRequest) -> str:
    """Which store a test's workspace is in: SQLite unless its module runs on ``STORES``."""
    return getattr(request, "param", "sqlite")


@pytest.fixture(scope="session")
def postgres() -> Iterator[Any]:
    """This test process's PostgreSQL server, started on first use. Without one installed the
    tests that need it skip, unless ``PROCESSION_REQUIRE_POSTGRES=1`` (CI) makes them fail."""
    from support.postgres import Server, binaries

    if binaries() is None:
        if os.environ.get("PROCESSION_REQUIRE_POSTGRES") == "1":
            pytest.fail("PostgreSQL's server is not installed (Debian: apt-get install postgresql)")
        pytest.skip("PostgreSQL's server is not installed (Debian: apt-get install postgresql)")
    server = Server()
    yield server
    server.stop()


@pytest.fixture
def db(tmp_path: Path, store_kind: str, request: pytest.FixtureRequest) -> Path | str:
    """Where the test's workspace is: a file, or a new workspace in the PostgreSQL server."""
    backend = BACKENDS[store_kind]
    return backend.workspace(request.getfixturevalue(backend.server) if backend.server else None, tmp_path)


@pytest.fixture
async def ws(db: Path | str) -> AsyncIterator[Workspace]:
    workspace = await Workspace.open(db, clock=Clock())
    yield workspace
    await workspace.close()


class Cli:
    """Runs ``procession`` as a user would: a real process, on the test's workspace, from one
    shell (``shell``: another one, a process session of its own), whose place in the journal
    (``cli.cursor``) is kept in the test's own runtime folder."""

    def __init__(self, db: Path, cwd: Path) -> None:
        self.db, self.cwd = db, cwd
        (cwd / "runtime").mkdir(mode=0o700, exist_ok=True)

    def env(self) -> dict[str, str]:
        return {**os.environ, "PROCESSION_DB": str(self.db), "XDG_RUNTIME_DIR": str(self.cwd / "runtime")}

    def __call__(self, *args: str, input: str | None = None, stdin: Any = None, check: bool = True,
                 shell: bool = False) -> subprocess.CompletedProcess[str]:
        """``input``: what standard input holds; or ``stdin``: a file it is (``/dev/zero``)."""
        env = self.env()
        proc = subprocess.run([sys.executable, "-m", "procession", *args], capture_output=True, text=True,
                              input=input, stdin=stdin, env=env, cwd=self.cwd, timeout=HANG_S, start_new_session=shell)
        if check and proc.returncode != 0:
            raise AssertionError(f"procession {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
        return proc

    def json(self, *args: str) -> object:
        return json.loads(self(*args, "--json").stdout)


@pytest.fixture
def cli(db: Path, tmp_path: Path) -> Iterator[Cli]:
    yield Cli(db, tmp_path)


@pytest.fixture
async def live(db: Path) -> AsyncIterator[Workspace]:
    """A workspace on the real clock, for tests that run an engine (timers are real)."""
    workspace = await Workspace.open(db)
    yield workspace
    await workspace.close()


@contextlib.asynccontextmanager
async def engine_on(path: Path, slots: int = 2, notify: Any = None, prices: Any = None, exporter: Any = None,
                    tracing: Any = None):
    """A real engine on the workspace at ``path``, in this event loop (short grace period),
    serving until the block ends; it sends notifications only where ``notify`` says, prices
    tokens by ``prices`` and exports spans only to ``exporter`` or where ``tracing`` says
    (never by the config file or the ``OTEL_*`` variables of whoever runs the tests)."""
    import asyncio

    from procession.engine import Engine
    from procession.engine import tracing as tracing_
    from procession.engine.notify import Settings
    from procession.model.prices import Prices

    eng = Engine(path, slots=slots, grace=0.3, notify=notify or Settings(), prices=prices or Prices(),
                 tracing=tracing or tracing_.Settings(), exporter=exporter)
    await eng.start()
    stop = asyncio.Event()
    task = asyncio.ensure_future(eng.serve(stop))
    try:
        yield eng
    finally:
        stop.set()
        await task


@pytest.fixture
async def engine(db: Path, live: Workspace):
    """A real engine on the test's workspace."""
    async with engine_on(db) as eng:
        yield eng


def dump(path: Path | str) -> list[str]:
    """Every row of every table of a workspace, as text: equal dumps, equal stores."""
    return backend_of(path).dump(path)


def sql(path: Path | str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """One statement on a workspace from outside (written in SQLite's dialect, as the calls
    write theirs), committed; the rows it read."""
    return backend_of(path).sql(path, statement, params)


from support.runs import proc_state  # noqa: E402,F401  (tests import it from here)
# The scripted model server and the real agent CLIs pointed at it, for any test folder.
from support.agent_clis import (  # noqa: E402,F401
    agent_sandbox, claude_sandbox, codex_sandbox, copilot_sandbox, gemini_sandbox, model_server, opencode_sandbox,
    qwen_sandbox,
)


FIXED = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC: the monitor's clock in tests and snapshots


@pytest.fixture
async def monitor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    """Make monitors: ``await monitor(db, **options)`` opens the workspace, then the app on it,
    with no engine (nothing runs by itself), a fixed clock, a config never written unless the
    test says where, and a themes folder of its own. Workspaces are closed after the test."""
    from procession.tui.config import Config
    from support.monitor import Monitor

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    opened: list[Workspace] = []

    async def make(db: Path, **kwargs: Any) -> Monitor:
        kwargs.setdefault("config", Config(path=None))
        kwargs.setdefault("user_themes", tmp_path / "themes")
        kwargs.setdefault("clock", lambda: FIXED)
        kwargs.setdefault("engine", False)
        ws = await Workspace.open(db, actor="tui")
        opened.append(ws)
        return Monitor(ws, **kwargs)

    yield make
    for ws in opened:
        await ws.close()
