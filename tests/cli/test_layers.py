"""The layer rule: faces above the core, and the core never imports the screen. lint-imports
checks the contracts; this checks that they cover every package, and that commands other
than the monitor do not even load Textual."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_subpackage_of_procession_is_in_a_layer():
    """The layers contract is exhaustive (a new package must be placed); this checks the folders
    on disk against it, so that the rule cannot silently stop covering a package."""
    contract = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]
    assert contract["type"] == "layers" and contract["exhaustive"] is True
    layers = {name.strip() for layer in contract["layers"] for name in layer.split("|")}
    ignored = set(contract["exhaustive_ignores"])
    children = {p.name for p in (ROOT / "core").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    children |= {"cli", "tui", "themes", "examples", "__main__"}
    assert children <= layers | ignored, sorted(children - layers - ignored)
    assert not (ROOT / "core" / "cli").exists() and (ROOT / "cli" / "__init__.py").exists()


def test_cli_commands_do_not_load_textual_or_the_mcp_sdk(tmp_path):
    code = ("import sys; from procession.cli import main; "
            "main(['--db', sys.argv[1], 'spawn', 's', '--agent', 'a']); main(['--db', sys.argv[1], 'ps', '--json']);"
            "print([m for m in ('textual', 'mcp', 'uvicorn', 'starlette') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ws.db")], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
