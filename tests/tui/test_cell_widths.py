"""Columns line up by the cells a terminal gives each character: a name in Chinese or with an
emoji takes two a character, in ``ps`` and in the monitor's table alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.cells import cell_len

from conftest import until
from procession import Workspace
from support.monitor import line_of, to

#: Names a terminal draws wider than their length: CJK, an emoji, and a plain one between them.
NAMES = ("夜间构建", "deploy 🚀 prod", "plain")


def _starts(line: str, *marks: str) -> list[int]:
    """The terminal column where each mark begins on ``line``."""
    return [cell_len(line[:line.index(mark)]) for mark in marks]


def test_ps_keeps_its_columns_in_line_after_wide_names(cli: Any) -> None:
    for name in NAMES:
        cli("spawn", name, "--agent", "a", "--runner", "builtin:echo")
    out = cli("ps").stdout.splitlines()
    header = out[0]
    wanted = _starts(header, " S ", "RUNNER")
    for name, line in zip(NAMES, out[1:4]):
        assert name in line
        assert _starts(line, " S ", "builtin:echo") == wanted, line


async def test_the_monitors_rows_keep_their_columns_in_line_after_wide_names(tmp_path: Path, monitor: Any) -> None:
    db = tmp_path / "ws.db"
    async with await Workspace.open(db) as ws:
        sids = [(await ws.spawn(name, "a", runner="builtin:echo")).sid for name in NAMES]
    app = await monitor(db)
    async with app.run_test(size=(160, 10)) as pilot:
        await until(lambda: app.loaded)
        await to(pilot, app, sids[0])
        lines = [line_of(app, sid) for sid in sids]
        assert {cell_len(line) for line in lines} == {app.table.size.width}
        assert len({tuple(_starts(line, "builtin:echo")) for line in lines}) == 1, lines
