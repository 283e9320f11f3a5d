"""The layer rule: the core never imports the screen. lint-imports checks the contract;
this checks that the contract names every core module, and that commands other than the
monitor do not even load Textual."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contract_lists_every_core_module():
    contract = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]
    listed = set(contract["source_modules"])
    modules = {f"procession.{p.stem}" for p in (ROOT / "core").glob("*.py") if p.stem not in ("__init__", "__main__")}
    modules.add("procession.runners")
    assert modules <= listed, f"add {sorted(modules - listed)} to the contract in pyproject.toml"


def test_cli_commands_do_not_load_textual(tmp_path):
    code = ("import sys; from procession.cli import main; "
            "main(['--db', sys.argv[1], 'spawn', 's', '--agent', 'a']); main(['--db', sys.argv[1], 'ps', '--json']);"
            "print('textual' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ws.db")], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"
