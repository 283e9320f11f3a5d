"""What the README and the refusals tell a person to install works: Procession is not on
PyPI, so ``pip install 'procession[postgresql]'`` failed (issue 35). Each extra named is one
the project defines, installed from the project's own folder."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Where a person is told what to install: the manual and every module's messages.
TOLD = [ROOT / "README.md", *sorted((ROOT / "core").rglob("*.py")), *sorted((ROOT / "cli").rglob("*.py"))]


def test_every_extra_named_is_the_projects_own_installed_from_its_folder() -> None:
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    named = []
    for file in TOLD:
        text = file.read_text(encoding="utf-8")
        assert "procession[" not in text, f"{file}: Procession is not on PyPI; name its extra as '.[NAME]'"
        named += re.findall(r"pip install[^`\n]*'\.\[([a-z,]+)\]'", text)
    assert {"postgresql", "test"} <= set(named)
    assert {extra for group in named for extra in group.split(",")} <= extras


def test_the_test_command_names_skipped_tests_at_the_end() -> None:
    """A skip (no agent CLI, no PostgreSQL) is said with its reason, not only counted."""
    for file in (ROOT / "README.md", ROOT / ".ci" / "run"):
        commands = re.findall(r"pytest -q[^\n`]*", file.read_text(encoding="utf-8"))
        assert commands and all(" -rs" in c for c in commands), (file, commands)
