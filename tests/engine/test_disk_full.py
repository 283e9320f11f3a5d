"""A workspace whose disk fills while a run goes on (a real, small tmpfs, filled by a file):
what the step said is kept and recorded once there is room again, the run does not stay
open, and the engine says so once, not every second."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from conftest import engine_on, until
from procession import Workspace
from support.disk import fill, small_disk  # noqa: F401 - a fixture
from support.runs import finished


async def test_a_run_ending_on_a_full_disk_is_recorded_once_there_is_room(
        small_disk: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="procession.engine")
    work = tmp_path / "work"
    work.mkdir()
    db = small_disk / "ws.db"
    step = "while [ ! -e go ]; do sleep 0.05; done; echo 'said while the disk was full'"
    async with await Workspace.open(db) as ws:
        sid = (await ws.spawn("s", "a", runner=f"command:{step}", cwd=str(work))).sid
        async with engine_on(db):
            await ws.activate(sid)
            await until(lambda: ws.info(sid))
            await until(lambda: _running(ws, sid))
            filler = fill(small_disk)
            (work / "go").touch()
            await until(lambda: any("not recorded yet" in r.getMessage() for r in caplog.records))  # the step is over
            assert not (await ws.runs(sid))[-1].ended  # and the engine could not record it
            filler.unlink()
            run = await until(lambda: finished(ws, sid))
            assert run.outcome == "ok"
            assert (await ws.history(sid))[-1].content == "said while the disk was full"
    said = [r.getMessage() for r in caplog.records]
    assert sum("not recorded yet" in m for m in said) == 1, said
    assert sum("the lease is not renewed" in m for m in said) <= 1, said
    assert sum("the lease is renewed again" in m for m in said) <= 1, said


async def _running(ws: Workspace, sid: int) -> bool:
    return (await ws.info(sid)).state.value == "running"
