"""Session content never reaches the terminal as control sequences: the monitor shows them."""

from __future__ import annotations

from procession import Workspace

HOSTILE = "before \x1b[2J\x1b]0;pwned\x07 \x9b31m after"
RAW = ("\x1b", "\x07", "\x9b")


async def test_control_characters_in_content_are_shown_not_sent(db, monitor):
    ws = await Workspace.open(db)
    sid = (await ws.spawn("plain name", "a", system=f"system {HOSTILE}", goal=f"goal {HOSTILE}",
                         runner="command:\x1b[2J")).sid
    await ws.send(sid, HOSTILE)
    await ws.memory_set(sid, "key", HOSTILE)
    await ws.close()
    app = await monitor(db)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        row = "".join(segment.text for segment in app.table.render_line(0))
        assert "command:\\x1b[2J" in row and not any(c in row for c in RAW)
        app.open_detail(sid)
        await pilot.pause()
        await pilot.pause()
        shown = [str(static.render()) for static in app.screen.query("Static")]
        assert any("\\x1b[2J" in text for text in shown), "the detail view shows the content"
        for text in shown:
            assert not any(c in text for c in RAW), text
