"""A run's reason is how it ended; what an agent CLI says of itself on the way (its warnings,
its diagnostics) is its log's. ``runs`` showed Claude Code's ``[ede_diagnostic] …`` and
Codex's ``WARNING: proceeding, even though we could not create PATH aliases…`` as reasons.

The events are the CLIs' own stream shapes (as the real CLIs print them: see
tests/agents for runs of the real ones), fed to the readers the runners use."""

from __future__ import annotations

import json
from pathlib import Path

from procession.engine.runners.agents.base import Turn
from procession.engine.runners.agents.claude import ClaudeReader
from procession.engine.runners.agents.codex import CodexReader


def fed(reader: ClaudeReader | CodexReader, *events: dict[str, object]) -> tuple[list[str], list[str]]:
    reader.feed("".join(json.dumps(e) + "\n" for e in events).encode())
    last = reader.close()
    return last.problems, last.diagnostics


def turn(tmp_path: Path) -> Turn:
    return Turn(1, "", 0, "", "", str(tmp_path), None, env={"CODEX_HOME": str(tmp_path)})


def test_claude_codes_error_result_is_the_reason_its_diagnostics_the_log(tmp_path: Path) -> None:
    problems, diagnostics = fed(ClaudeReader(turn(tmp_path)), {
        "type": "result", "subtype": "error_during_execution", "is_error": True,
        "errors": ["[ede_diagnostic] result_type=user last_content_type=n/a stop_reason=tool_use"]})
    assert problems == ["Claude Code: error_during_execution"]
    assert diagnostics == ["Claude Code: [ede_diagnostic] result_type=user last_content_type=n/a stop_reason=tool_use"]


def test_a_codex_warning_in_a_turn_that_completed_is_the_logs_alone(tmp_path: Path) -> None:
    warning = {"type": "item.completed", "item": {"id": "0", "type": "error", "message":
                                                  "WARNING: proceeding, even though we could not create PATH aliases"}}
    completed = {"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 2}}
    assert fed(CodexReader(turn(tmp_path)), warning, completed) == (
        [], ["Codex: WARNING: proceeding, even though we could not create PATH aliases"])
    failed = {"type": "turn.failed", "error": {"message": "stream disconnected"}}
    assert fed(CodexReader(turn(tmp_path)), warning, failed) == (
        ["Codex: stream disconnected"], ["Codex: WARNING: proceeding, even though we could not create PATH aliases"])


def test_claude_codes_window_is_its_turns_models_whatever_order_the_result_lists_models_in(tmp_path: Path) -> None:
    """The window came and went (1,000,000, then 200,000) as the result listed the CLI's side
    calls' model first: it is the window of the model the turn's own calls ran on."""
    usage = {"claude-haiku-x": {"contextWindow": 200_000}, "claude-sonnet-x": {"contextWindow": 1_000_000}}
    for order in (usage, dict(reversed(usage.items()))):
        reader = ClaudeReader(turn(tmp_path))
        reader.feed("".join(json.dumps(e) + "\n" for e in [
            {"type": "assistant", "message": {"id": "m1", "model": "claude-sonnet-x", "content": [],
                                              "usage": {"input_tokens": 900}}},
            {"type": "result", "subtype": "success", "usage": {"input_tokens": 900}, "modelUsage": order}]).encode())
        assert reader.close().context == (900, 1_000_000)
