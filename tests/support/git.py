"""Real git repositories in temporary folders, for the tests of git-aware sessions."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from procession import Workspace

#: Who commits in tests (and in Procession's own merge commits there): git needs a name.
IDENTITY = {"GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "test@example.invalid",
            "GIT_COMMITTER_NAME": "Test", "GIT_COMMITTER_EMAIL": "test@example.invalid"}


@pytest.fixture
def git_identity(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Git as ``quiet_env`` has it for everything the test runs, Procession's own git included
    (its merge commits need a name; no user hook or signing applies)."""
    for key, value in IDENTITY.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    yield


def quiet_env() -> dict[str, str]:
    """An environment where no user or system git config (hooks, signing, templates) applies."""
    return {**os.environ, **IDENTITY, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
            "LC_ALL": "C"}


class Repo:
    """A worktree of a repository: ``git(...)`` runs git in it, ``commit`` writes files and commits."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def init(cls, path: Path, files: dict[str, str] | None = None, branch: str = "main") -> Repo:
        path.mkdir(parents=True, exist_ok=True)
        repo = cls(path)
        repo.git("init", "-q", "-b", branch)
        repo.commit(files or {"README.md": "hello\n"}, "first")
        return repo

    def git(self, *args: str, check: bool = True) -> str:
        proc = subprocess.run(["git", *args], cwd=self.path, capture_output=True, text=True, env=quiet_env())
        if check and proc.returncode != 0:
            raise AssertionError(f"git {' '.join(args)}: {proc.stderr}")
        return proc.stdout.strip()

    def write(self, files: dict[str, str]) -> None:
        for name, text in files.items():
            target = self.path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)

    def commit(self, files: dict[str, str], message: str, *extra: str) -> str:
        self.write(files)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message, *extra)
        return self.head()

    def head(self, ref: str = "HEAD") -> str:
        return self.git("rev-parse", ref)

    def read(self, name: str) -> str:
        return (self.path / name).read_text()


async def session_in(ws: Workspace, folder: Path, name: str = "review") -> int:
    """A session working in ``folder`` (bound to it, with a file of it and a memory key), as
    a fork or a merge of it finds one."""
    sid = (await ws.spawn(name, "review", cwd=str(folder))).sid
    await ws.bind(sid, "folder", str(folder))
    await ws.bind(sid, "file", str(folder / "notes.md"), mode="ro")
    await ws.memory_set(sid, "verdict", "undecided")
    return sid
