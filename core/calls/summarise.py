"""The built-in extractive summariser used by ``compress``.

It needs no model: it picks the sentences that carry the most frequent content words of
the archived messages (Luhn's method), in turn from each role so that both sides of a
conversation stay, keeps them in their original order, and stays within a token budget. A model-made summary can replace it later through a runner; the
fold stores whatever text stands for the archived range, and ``expand`` never depends on
the summary being any good.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence

from ..model.text import plural

_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+|\n+")
_WORD = re.compile(r"\w+", re.UNICODE)
_STOP = frozenset(
    "a an and are as at be but by for from has have i if in into is it its of on or so that the their"
    " then there these this to was we were what when which will with you your not can do does".split()
)
MAX_SENTENCE_CHARS = 240
#: Messages read for a summary; longer ranges are sampled evenly (first and last included),
#: so compressing 100,000 messages costs about what compressing 2,000 does.
MAX_READ = 2_000


def summarise(messages: Sequence[tuple[str, str]], budget: int, count: Callable[[str], int]) -> str:
    """A summary of ``(role, content)`` pairs within about ``budget`` tokens."""
    header = f"[summary of {plural(len(messages), 'earlier message')}]"
    sentences: list[tuple[int, str]] = []
    if len(messages) > MAX_READ:
        step = (len(messages) - 1) / (MAX_READ - 1)
        messages = [messages[round(i * step)] for i in range(MAX_READ)]
    for role, content in messages:
        for part in _SENTENCE.split(content):
            part = " ".join(part.split())
            if len(part) > MAX_SENTENCE_CHARS:
                part = part[: MAX_SENTENCE_CHARS - 1] + "…"
            if part:
                sentences.append((len(sentences), f"{role}: {part}"))
    if not sentences:
        return header
    freq = Counter(w for _, s in sentences for w in _WORD.findall(s.lower()) if w not in _STOP and len(w) > 2)

    def score(sentence: str) -> float:
        words = [w for w in _WORD.findall(sentence.lower()) if w not in _STOP and len(w) > 2]
        return float(sum(freq[w] for w in words) / (1 + len(words)) ** 0.5)

    ranked = sorted(sentences, key=lambda s: -score(s[1]))
    chosen: list[tuple[int, str]] = []
    used = count(header)
    for index, sentence in _both_sides(ranked):
        cost = count(sentence)
        if used + cost > budget and chosen:
            continue
        chosen.append((index, sentence))
        used += cost
        if used >= budget:
            break
    return "\n".join([header, *(s for _, s in sorted(chosen))])


def _both_sides(ranked: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The ranked sentences taken in turn from each role (best first within each), so that a
    summary keeps what each side said: one side's frequent words cannot crowd out the other."""
    by_role: dict[str, list[tuple[int, str]]] = {}
    for item in ranked:
        by_role.setdefault(item[1].split(":", 1)[0], []).append(item)
    queues = list(by_role.values())
    out: list[tuple[int, str]] = []
    for i in range(max(map(len, queues), default=0)):
        out.extend(q[i] for q in queues if i < len(q))
    return out
