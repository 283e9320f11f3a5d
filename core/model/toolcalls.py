"""A tool call as a history message, whoever made it: an agent CLI (its events), or the
``openai:`` runner's own loop. Both store it the same way, so that every face (``show``,
the monitor, ``compress --mask-tools``) reads one shape: role ``tool``, readable content,
and meta ``{"tool": {id, name, input, output, output_size, is_error}}``.
"""

from __future__ import annotations

import json
from typing import Any, Final

#: What a tool call's stored output keeps (the full size is noted beside it).
OUTPUT_MAX: Final = 16 * 1024
#: How much of a tool's input the readable line and the status show.
SUMMARY_MAX: Final = 160


def summary(value: Any) -> str:
    """A tool input as one short line: its command or path if it has one, else compact JSON."""
    if isinstance(value, dict):
        for key in ("command", "cmd", "file_path", "filePath", "path", "pattern", "url", "query"):
            if isinstance(value.get(key), str | list):
                shown = value[key] if isinstance(value[key], str) else " ".join(map(str, value[key]))
                break
        else:
            shown = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    else:
        shown = str(value)
    return one_line(shown)


def one_line(text: str, limit: int = SUMMARY_MAX) -> str:
    """``text`` on one line, its runs of white space one space, cut to ``limit`` with an ellipsis."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def tool_message(call_id: str, name: str, input: Any, output: str | None, is_error: bool,
                 **meta: Any) -> tuple[str, str, dict[str, Any]]:
    """A tool call as a history message: readable content, and the structured call in meta
    (``output`` bounded to ``OUTPUT_MAX``, its full size beside it; None: it never returned)."""
    size = len(output.encode("utf-8", "replace")) if output is not None else 0
    kept = output if output is None or size <= OUTPUT_MAX else output.encode("utf-8", "replace")[:OUTPUT_MAX].decode(
        "utf-8", "ignore")
    tool = {"id": call_id, "name": name, "input": input, "output": kept, "output_size": size, "is_error": is_error}
    head = f"{name}: {summary(input)}"
    if output is None:
        body = "(no result: the run stopped first)"
    else:
        body = kept or "(no output)"
        if kept is not None and len(kept) < len(output):
            body += f"\n[… {size} bytes in all]"
    return "tool", f"{head}\n{'error: ' if is_error else ''}{body}", {**meta, "tool": tool}


def text_of(content: Any) -> str:
    """A tool result's content as text (a string, or a list of text blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    return "" if content is None else json.dumps(content, ensure_ascii=False)
