"""A small file system of a test's own, and a way to fill it: for what a full disk does."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB file system of the test's own (mounting one takes root: CI runs as root)."""
    where = tmp_path / "small"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small file system here (needs root): {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(where: Path, leave: int = 0) -> Path:
    """Fill the file system ``where`` is on, but for about ``leave`` bytes: the file that fills it."""
    filler = where / "filler"
    with contextlib.suppress(OSError), filler.open("wb") as out:
        while True:
            out.write(b"\0" * 65536)
            out.flush()
    os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler
