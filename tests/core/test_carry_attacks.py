"""What an agent's own files may bring in: a transcript or a session folder any process could
have written. A link among them to a secret is not followed into a snapshot; a transcript's
word on where its session ran (``/etc``, the home folder, ``~/.ssh``) is said, and holds the
session for approval. Transcripts written in Claude Code's own format (``model.transcripts``);
no CLI runs here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from procession import InvalidArgument, Workspace
from procession.model import transcripts
from procession.model.transcripts.base import Said

CLAUDE = transcripts.format_of("claude")


def claude_session(home: Path, cwd: str) -> dict[str, str]:
    """A Claude Code session with a question and an answer, as the CLI keeps it in ``home``."""
    env = {"HOME": str(home)}
    ref = CLAUDE.write([Said("user", "what is in here?"), Said("assistant", "Some files.")], env, cwd, "claude-x")
    assert ref is not None
    return ref


def in_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, folder: str = "work") -> tuple[Path, Path]:
    """A home folder for the CLI's files and a project folder it worked in."""
    home, work = tmp_path / "home", tmp_path / folder
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home, work


async def test_save_carries_no_file_a_link_in_the_sessions_folder_points_to(
        ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home, work = in_home(tmp_path, monkeypatch)
    secret = tmp_path / "id_rsa"
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY----- TOP-SECRET")
    ref = claude_session(home, str(work))
    own = Path(ref["transcript"][:-len(".jsonl")])  # the session's own folder: tool results, subagents
    (own / "tool-results").mkdir(parents=True)
    (own / "tool-results" / "out.txt").write_text("a long tool output")
    (own / "tool-results" / "leak.txt").symlink_to(secret)
    (own / "subagents").symlink_to(tmp_path)  # a folder link, walked into by os.walk's callers
    [made] = (await ws.adopt("claude", ref["id"], env={"HOME": str(home)})).results
    snap = tmp_path / "snap.json"
    await ws.save(made.sid, file=str(snap))
    data = snap.read_bytes()
    assert b"a long tool output" in data and b"TOP-SECRET" not in data


async def test_a_transcript_that_is_a_link_is_not_read(ws: Workspace, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    home, work = in_home(tmp_path, monkeypatch)
    ref = claude_session(home, str(work))
    [made] = (await ws.adopt("claude", ref["id"], env={"HOME": str(home)})).results
    decoy = tmp_path / "decoy.jsonl"
    decoy.write_bytes(Path(ref["transcript"]).read_bytes())
    os.unlink(ref["transcript"])
    os.symlink(decoy, ref["transcript"])
    snap = tmp_path / "snap.json"
    with pytest.raises(InvalidArgument, match="a symbolic link, not a regular file; refused"):
        await ws.save(made.sid, file=str(snap))
    assert not snap.exists()


@pytest.mark.parametrize("where", ["/etc", "home", "ssh"])
async def test_adopt_says_where_a_transcript_says_it_ran_and_holds_an_unsafe_folder(
        ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    cwd = {"/etc": "/etc", "home": str(home), "ssh": str(home / ".ssh")}[where]
    ref = claude_session(home, cwd)
    adoption = await ws.adopt("claude", ref["id"], env={"HOME": str(home)})
    [made] = adoption.results
    assert made.cwd == cwd and made.held
    assert (await ws.info(made.sid)).armed is False
    assert any("waits for your approval" in n.text for n in made.notes)
    from procession.present import results

    assert f"working in {cwd} (held for approval)" in results.describe(made)


async def test_adopt_of_a_project_folder_is_armed_and_says_the_folder(ws: Workspace, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    home, work = in_home(tmp_path, monkeypatch, "project")
    ref = claude_session(home, str(work))
    [made] = (await ws.adopt("claude", ref["id"], env={"HOME": str(home)})).results
    assert made.cwd == str(work) and not made.held and (await ws.info(made.sid)).armed


async def test_a_snapshots_environment_is_listed_whole_before_it_is_armed(
        ws: Workspace, tmp_path: Path, cli: object) -> None:
    """A snapshot carrying ``PYTHONPATH`` pointing at its own folder ran its own
    ``sitecustomize.py`` once approved: ``approve`` lists every setting it arms, flagging those
    that change what a program loads, and every passed name, before asking."""
    sid = (await ws.spawn("traveller", "a", runner="command:python3 -c 'print(1)'", cwd=str(tmp_path),
                          env={"PYTHONPATH": str(tmp_path), "REGION": "eu"}, passed=["API_TOKEN"],
                          net="none")).sid
    snap = tmp_path / "t.json"
    await ws.save(sid, file=str(snap))
    loaded = (await ws.load(str(snap))).sid
    listed = cli("approve", str(loaded), check=False).stderr  # type: ignore[operator]
    assert f"env PYTHONPATH={tmp_path}   <- changes what a program runs or loads" in listed
    assert "env REGION=eu" in listed and "<- changes" not in listed.split("env REGION=eu")[1].splitlines()[0]
    assert "passes $API_TOKEN" in listed and "bounds bound (its bindings), net none" in listed
    assert (await ws.info(loaded)).armed is False  # not on a terminal, no --yes: nothing armed
