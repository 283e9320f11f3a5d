"""MkDocs hook: the pages read as Git hosts render them.

The pages are written in GitHub's Markdown (they were the README, and are read on Git hosts
too): a pipe inside a code span in a table row is escaped, ``\\|``, which GitHub shows as
``|``. Python-Markdown's tables already ignore a pipe inside a code span, and would show the
backslash, so in table rows the escape is dropped inside code spans before the page renders.
"""

from __future__ import annotations

import re
from typing import Any

_CODE = re.compile(r"`[^`\n]*`")


def on_page_markdown(markdown: str, **_: Any) -> str:
    lines, fenced = [], False
    for line in markdown.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if not fenced and line.lstrip().startswith("|"):
            line = _CODE.sub(lambda m: m.group(0).replace("\\|", "|"), line)
        lines.append(line)
    return "\n".join(lines)
