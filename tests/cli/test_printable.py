"""Nothing reaches the terminal raw from the CLI: escape sequences, OSC strings and C1
controls that came from a snapshot file, a runner or a user's words are shown as ``\\xNN`` in
every output — the reads, ``--json``, the foreground run's report, refusals and usage errors."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import os
import time
from pathlib import Path

from conftest import HANG_S
from procession.model.snapshot import dump

CONCEAL = "\x1b[8m"  # "hide what follows"
OSC = "\x1b]0;pwned\x07"  # sets the terminal's title
CSI_C1 = "\x9b31m"  # a CSI in one byte
HOSTILE = f"a{CONCEAL}hidden{OSC}{CSI_C1}z"
#: What a terminal could act on (newlines and tabs are text).
RAW = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def hostile_snapshot(path: Path) -> None:
    session = {"uuid": "u", "name": "payroll", "agent": "hr", "goal": HOSTILE, "system": f"be careful {HOSTILE}",
               "priority": 0, "runner": f"command:{CONCEAL}curl x | sh", "window": 10_000, "timeout": None,
               "created": 0.0}
    path.write_bytes(dump({
        "session": session,
        "messages": [{"seq": 1, "role": "user", "content": HOSTILE, "author": f"mallory{OSC}", "pinned": False,
                      "created": 0.0, "meta": None}],
        "folds": [], "memory": {"notes": HOSTILE},
        "resources": [{"kind": "url", "uri": f"https://x/{CSI_C1}", "mode": "ro"}],
        "triggers": [{"kind": "watch", "spec": {"paths": [f"/srv/{CONCEAL}data"], "debounce_ms": 100}}],
    }))


def clean(out: subprocess.CompletedProcess[str], *, visible: bool = False) -> str:
    both = out.stdout + out.stderr
    assert not RAW.search(both), f"raw control in {out.args[3:]}: {both!r}"
    assert "Traceback" not in both
    if visible:  # as printable shows it, or as JSON escapes it inside a value
        assert "\\x1b[8m" in both or "\\u001b[8m" in both, f"{out.args[3:]} does not show what was hidden: {both!r}"
    return both


def test_reads_show_hostile_text_visibly_and_never_raw(cli, tmp_path):
    snap = tmp_path / "hostile.json"
    hostile_snapshot(snap)
    sid = cli("load", str(snap)).stdout.strip()
    for args in (["show", sid], ["history", sid], ["history", sid, "--short"], ["memory", sid, "ls"],
                 ["memory", sid, "get", "notes"], ["trigger", "ls", sid], ["approve", sid, "--yes"], ["show", sid]):
        clean(cli(*args), visible=True)
    for args in (["ps"], ["log", "-n", "100"], ["runs"]):
        clean(cli(*args))
    for args in (["show", sid], ["history", sid], ["ps"], ["log"], ["memory", sid, "ls"], ["trigger", "ls", sid]):
        clean(cli(*args, "--json"))
    assert cli.json("memory", sid, "get", "notes") == HOSTILE, "JSON still reads back exactly"


def test_a_run_error_is_shown_visibly_in_every_report(cli):
    step = r"command:printf 'boom \033[8m \033]0;pwned\007 \302\233 31m' >&2; exit 3"
    sid = cli("spawn", "s", "--agent", "a", "--runner", step).stdout.strip()
    report = clean(cli("activate", sid, "--now", check=False), visible=True)
    assert "run 1 failed" in report
    clean(cli("activate", sid, "--now", "--json", check=False))
    clean(cli("runs", sid), visible=True)
    clean(cli("runs", sid, "--json"))
    clean(cli("log", sid, "--json"))


def test_refusals_quoting_user_text_stay_on_one_printable_line(cli, tmp_path):
    cli("spawn", "s", "--agent", "a")
    cli("bind", "1", "url", "https://example.com")
    for args in (["unbind", "1", HOSTILE], ["load", str(tmp_path / f"{HOSTILE}.json")],
                 ["ps", "--db", str(tmp_path / HOSTILE / "ws.db")], ["memory", "1", "delete", HOSTILE],
                 ["send", "1", "--jsonl", str(tmp_path / HOSTILE)],
                 ["trigger", "add", "1", "cron", HOSTILE], ["spawn", "t", "--agent", "a", "--runner", HOSTILE],
                 ["memory", "1", "set", f"k{HOSTILE}", "1"], ["memory", "1", "set", "k", HOSTILE]):
        out = cli(*args, check=False)
        assert out.returncode == 1, (args, out.stderr)
        said = clean(out)
        assert said.startswith("procession: error:") and said.count("\n") == 1, said
    noted = clean(cli("bind", "1", "folder", str(tmp_path / HOSTILE)))  # accepted, with a note naming the path
    assert "procession: note:" in noted and "\\x1b]0;pwned\\x07" in noted
    usage = cli("merge", "1", "1", "--set", HOSTILE, check=False)
    assert usage.returncode == 2
    clean(usage)


def test_the_engine_log_is_printable(cli, tmp_path):
    """``procession run`` logs a session it cannot start here with its folder's name as it is."""
    folder = tmp_path / f"gone{OSC}"
    folder.mkdir()
    cli("spawn", "s", "--agent", "a", "--cwd", str(folder), "--runner", "command:true")
    folder.rmdir()
    env = {**os.environ, "PROCESSION_DB": str(cli.db)}
    engine = subprocess.Popen([sys.executable, "-m", "procession", "run"], env=env, stderr=subprocess.PIPE,
                              text=True)
    try:
        cli("activate", "1")
        deadline = time.time() + HANG_S
        while time.time() < deadline and cli.json("show", "1")["state"] != "suspended":  # its folder is not here
            time.sleep(0.1)
    finally:
        engine.send_signal(signal.SIGINT)
        _, err = engine.communicate(timeout=30)
    assert "is not on this machine" in err and "\\x1b]0;pwned\\x07" in err
    assert not RAW.search(err), err
