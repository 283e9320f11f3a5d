"""Files a user names are read with a bound (issue 35): ``procession load /dev/zero`` filled
memory until the kernel killed it. Each command that reads a named file refuses a device, a
FIFO (without waiting for a writer) and a folder, and a file over its stated limit, in one
line, changing nothing; the config's tables are read the same way."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from test_cli import refused, spawn
from conftest import dump
from procession.model import config, user_files
from procession.present.parse import JSONL_LINE_MAX


def named(tmp_path: Path, limit: int) -> dict[str, str]:
    """What a person may name instead of a file: a device, a FIFO, a folder and a regular file
    one byte over ``limit`` (sparse: it takes no room on disk)."""
    fifo, folder, large = tmp_path / "fifo", tmp_path / "folder", tmp_path / "large"
    os.mkfifo(fifo)
    folder.mkdir()
    with open(large, "wb") as fh:
        fh.truncate(limit + 1)
    return {"/dev/zero": "a device", str(fifo): "a FIFO", str(folder): "a folder",
            str(large): f"larger than {user_files.size_words(limit)}"}


COMMANDS = {
    "load": (user_files.SNAPSHOT_WHOLE_MAX, lambda sid, f: ("load", f)),
    "memory load": (user_files.TEXT_FILE_MAX, lambda sid, f: ("memory", str(sid), "load", f)),
    "set --system-file": (user_files.TEXT_FILE_MAX, lambda sid, f: ("set", str(sid), "--system-file", f)),
    "send --jsonl": (None, lambda sid, f: ("send", str(sid), "--jsonl", f)),
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_named_file_that_is_no_regular_file_or_too_large_is_refused_in_one_line(
        cli: Any, db: Path, tmp_path: Path, command: str) -> None:
    limit, argv = COMMANDS[command]
    sid = spawn(cli)
    before = dump(db)
    for path, said in named(tmp_path, limit or user_files.TEXT_FILE_MAX).items():
        if limit is None and said.startswith("larger"):
            continue  # a transcript is streamed, whatever its size: its lines are bounded (below)
        error = refused(cli(*argv(sid, path), check=False))
        assert path in error and said in error, error
        assert dump(db) == before


def test_standard_input_is_read_no_further_than_the_limit(cli: Any, db: Path, tmp_path: Path) -> None:
    """``- < /dev/zero``: a memory file or a system prompt past 64 MiB, a transcript's line past
    its limit, refused as read (the reader never holds more than the limit)."""
    sid = spawn(cli)
    before = dump(db)
    for argv, said in [(("memory", str(sid), "load", "-"), "standard input is larger than 64 MiB"),
                       (("set", str(sid), "--system-file", "-"), "standard input is larger than 64 MiB"),
                       (("send", str(sid), "--jsonl", "-"),
                        f"- line 1 is longer than {JSONL_LINE_MAX >> 20} Mi characters")]:
        with open("/dev/zero", "rb") as zero:
            proc = cli(*argv, stdin=zero, check=False)
        assert said in refused(proc), proc.stderr
        assert dump(db) == before


def test_the_config_file_is_read_with_a_bound(tmp_path: Path) -> None:
    """The config's tables (``[notify]``, ``[prices]``): a problem named, never a read of
    ``/dev/zero`` or a wait on a FIFO."""
    for path, said in named(tmp_path, user_files.SETTINGS_MAX).items():
        found, problem = config.table("prices", Path(path))
        assert found is None and problem is not None and said in problem, problem


def test_a_regular_file_within_the_limit_is_read(cli: Any, tmp_path: Path) -> None:
    sid = spawn(cli)
    (tmp_path / "prompt.txt").write_text("be brief")
    cli("set", str(sid), "--system-file", str(tmp_path / "prompt.txt"))
    assert cli.json("show", str(sid))["system"] == "be brief"
