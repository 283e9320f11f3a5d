"""What ``procession grep`` looks for: words and quoted phrases, every one of them in a message.

The same query means the same on both stores: each says it in its own full-text language
(``store.search``). No operator is read from the text (a ``-`` or an ``OR`` is a word like any
other): what a person types is looked for, never parsed into something else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from .errors import InvalidArgument

#: A quoted phrase, or a run of anything else but white space and quotes.
_PART: Final = re.compile(r'"([^"]*)"|([^\s"]+)')
#: How a snippet marks where a hit starts and ends (control characters no text of ours holds as such).
START: Final = "\x02"
END: Final = "\x03"
#: How many terms a query may hold.
TERMS_MAX: Final = 32


@dataclass(slots=True, frozen=True)
class Query:
    """Each term a message must hold: a word, or words next to each other (a phrase)."""

    terms: tuple[str, ...]
    text: str

    @classmethod
    def parse(cls, text: str) -> Query:
        """``text``'s words and "quoted phrases"; a query of no word is refused in one line."""
        terms = []
        for phrase, word in _PART.findall(text):
            term = " ".join((phrase if phrase else word).split())
            if re.search(r"\w", term):  # punctuation alone matches nothing in either index
                terms.append(term)
        if not terms:
            raise InvalidArgument(f"nothing to look for in {text!r}: give a word, or a \"quoted phrase\"")
        if len(terms) > TERMS_MAX:
            raise InvalidArgument(f"a search takes at most {TERMS_MAX} words or phrases, not {len(terms)}")
        return cls(tuple(terms), text)


@dataclass(slots=True, frozen=True)
class Found:
    """A message that holds every term, where it is, and what of it matched.

    ``snippet`` is the text around the hits, each between ``START`` and ``END``; ``forks``
    are the sessions that share it through their lineage (a fork reads its parent's messages
    up to its fork point: the message is one row, shown once); ``archived``: folded away by
    a compress in its session (found all the same, as an archived message is kept)."""

    session: int
    name: str
    agent: str
    host: str
    seq: int
    role: str
    author: str
    created: float
    snippet: str
    rank: float
    archived: bool
    forks: tuple[int, ...] = ()

    def to_json(self) -> dict[str, object]:
        plain, marks, at = [], [], 0
        for i, part in enumerate(re.split(f"[{START}{END}]", self.snippet)):
            if i % 2:
                marks.append([at, at + len(part)])
            plain.append(part)
            at += len(part)
        return {"session": self.session, "name": self.name, "agent": self.agent, "host": self.host,
                "seq": self.seq, "role": self.role, "author": self.author, "created": self.created,
                "snippet": "".join(plain), "marks": marks, "rank": self.rank, "archived": self.archived,
                "forks": list(self.forks)}
