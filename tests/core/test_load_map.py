"""``load --map OLD=NEW``: a snapshot's paths moved on the way in, and a map that moves nothing said."""

from __future__ import annotations

from pathlib import Path

import pytest

from procession import Workspace
from procession.model.errors import InvalidArgument


async def test_load_map_moves_the_folder_bound_paths_and_watches(ws: Workspace, tmp_path: Path) -> None:
    old, new = tmp_path / "laptop" / "app", tmp_path / "desktop" / "app"
    for folder in (old, new):
        (folder / "src").mkdir(parents=True)
        (folder / "notes.txt").write_text("x")
    sid = (await ws.spawn("app", "dev", cwd=str(old))).sid
    await ws.bind(sid, "file", str(old / "notes.txt"))
    await ws.bind(sid, "url", "https://example.invalid/app")  # not a path: left alone
    await ws.trigger_add(sid, "watch", [str(old / "src")])
    snap = tmp_path / "app.json"
    await ws.save(sid, file=str(snap))

    loaded = await ws.load(str(snap), mapping={str(tmp_path / "laptop"): str(tmp_path / "desktop"),
                                               "/nowhere": "/elsewhere"})
    shown = await ws.show(loaded.sid)
    assert shown.info.cwd == str(new)
    assert sorted(r.uri for r in shown.resources) == [str(new / "notes.txt"), "https://example.invalid/app"]
    assert [t.spec["paths"] for t in shown.info.triggers] == [[str(new / "src")]]
    assert [n.text for n in loaded.notes if "--map" in n.text] == ["--map /nowhere: no path of the session is in"
                                                                   " that folder"]


async def test_load_without_a_map_keeps_a_folder_that_is_here_and_says_when_it_is_not(
        ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    sid = (await ws.spawn("app", "dev", cwd=str(gone))).sid
    snap = tmp_path / "app.json"
    await ws.save(sid, file=str(snap))
    assert (await ws.show((await ws.load(str(snap))).sid)).info.cwd == str(gone)
    gone.rmdir()
    monkeypatch.chdir(tmp_path)
    loaded = await ws.load(str(snap))
    assert (await ws.show(loaded.sid)).info.cwd == str(tmp_path)
    assert any(f"its folder {gone} is not here" in n.text for n in loaded.notes)
    with pytest.raises(InvalidArgument, match="absolute"):
        await ws.load(str(snap), mapping={"relative": "/x"})


async def test_a_map_to_a_folder_not_here_says_so_and_never_advises_a_folder_onto_itself(
        ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Loaded in the folder it was saved in, with a map to one that is not here: it stays, and
    the note no longer advises ``--map SAVED=SAVED``."""
    home = tmp_path / "app"
    home.mkdir()
    sid = (await ws.spawn("app", "dev", cwd=str(home))).sid
    snap = tmp_path / "app.json"
    await ws.save(sid, file=str(snap))
    monkeypatch.chdir(home)
    loaded = await ws.load(str(snap), mapping={str(home): str(tmp_path / "typo")})
    assert (await ws.show(loaded.sid)).info.cwd == str(home)
    [said] = [n.text for n in loaded.notes if "is not here" in n.text]
    assert said == f"the folder --map gives it, {tmp_path / 'typo'}, is not here: it works in the folder it was saved in"
