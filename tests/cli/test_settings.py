"""Config typos are said, not ignored (issue 35): a key no reader takes (``refresh = 5``, a
key placed under the wrong table, ``[keys] suspnd``) is noted once by each command that reads
the config, and ``procession config --check`` lists every problem the file has."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from procession.present.keymap import BINDING_IDS

TYPOS = """\
refresh = 5
theme = "procession"
[notify]
command = ["true"]
reason = ["finished"]
interval = 2
[keys]
suspnd = "z"
"""


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's config file, in a config folder of the test's own."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    where = tmp_path / "config" / "procession" / "config.toml"
    where.parent.mkdir(parents=True)
    return where


def said(where: Path) -> list[str]:
    """What is said of ``TYPOS``: each unknown key, where the file places it, with a hint."""
    return [f"config {where}: unknown key 'refresh', ignored",
            f"config {where}: unknown key 'notify.reason', ignored (did you mean 'reasons'?)",
            f"config {where}: unknown key 'notify.interval', ignored (it belongs at the top of the file,"
            " before any [table])",
            f"config {where}: unknown key 'keys.suspnd', ignored (did you mean 'suspend'?)"]


def test_config_check_lists_each_problem_and_exits_1(cli: Any, config_file: Path) -> None:
    config_file.write_text(TYPOS)
    proc = cli("config", "--check", check=False)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.splitlines() == [str(config_file), *(f"  {line}" for line in said(config_file))]
    config_file.write_text('interval = 2\n[keys]\nsuspend = "z"\n[notify]\nreasons = ["finished"]\n')
    assert cli("config", "--check").stdout.splitlines() == [str(config_file), "  no problems"]


def test_config_check_names_a_value_a_reader_refuses(cli: Any, config_file: Path) -> None:
    config_file.write_text("interval = 500\n")
    assert "interval must be 0.1..60 seconds" in cli("config", "--check", check=False).stdout


def test_an_engine_notes_each_unknown_key_once(cli: Any, config_file: Path) -> None:
    """``activate --now`` runs an engine, which reads the config: each unknown key is noted
    once on standard error, and the run goes on."""
    config_file.write_text(TYPOS)
    cli("spawn", "s", "--agent", "a", "--runner", "command:true")
    proc = cli("activate", "1", "--now")
    notes = [line.removeprefix("procession: note: ") for line in proc.stderr.splitlines() if "unknown key" in line]
    assert notes == said(config_file), proc.stderr


def test_the_binding_ids_are_the_monitors() -> None:
    """``[keys]`` is checked against the monitor's own bindings, read without Textual."""
    from procession.tui.app import ProcessionApp
    from procession.tui.main import MainScreen

    declared = {binding.id for cls in (ProcessionApp, *MainScreen.__mro__)
                for binding in vars(cls).get("BINDINGS", ()) if getattr(binding, "id", None)}
    assert BINDING_IDS == declared
