"""A session's context as its model counts it: the factor a real tokenizer gives, once.

Counts are stored with each message in the workspace's counter and summed, so listings never
read a message; a session's factor (``store.tokens``) turns that sum into its model's tokens.
A real tokenizer sets the factor by counting the active context once, when the user gives it
(``set --tokenizer``) or the session migrates to another model; the server's reports refine
it after every request (the engine's ``emit``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..model import runner_spec
from ..model.errors import InvalidArgument
from ..store import Tx, tokens
from . import history

#: ``set --tokenizer`` values that are not a tokenizer: the model's own (tiktoken's, cached)
#: and none (the workspace's counter).
AUTO, NONE = "auto", "none"


@dataclass(frozen=True, slots=True)
class Counting:
    """What a session's row is to hold: its tokenizer (None: none), factor and report count."""

    tokenizer: str | None
    scale: float
    samples: int = 0

    def columns(self) -> dict[str, Any]:
        return {"tokenizer": self.tokenizer, "token_scale": self.scale, "token_samples": self.samples}


def model_tokenizer(runner: str) -> tokens.Tokenizer | None:
    """The tokenizer of a runner's model that is at hand offline (tiktoken's, for OpenAI's)."""
    spec = runner_spec.parse(runner)
    return tokens.for_model(spec.target) if spec.kind == "openai" and spec.target else None


def chosen(spec: str, runner: str) -> tokens.Tokenizer | None:
    """The tokenizer ``set --tokenizer SPEC`` names for a session on ``runner`` (None: none)."""
    if spec == NONE:
        return None
    if spec == AUTO:
        found = model_tokenizer(runner)
        if found is None:
            raise InvalidArgument(f"no tokenizer for {runner}'s model is available offline here: give a"
                                  " tokenizer.json file (the model's repository has one), or tiktoken:ENCODING")
        return found
    return tokens.load(spec)


async def recount(tx: Tx, row: Any, tokenizer: tokens.Tokenizer | None) -> Counting:
    """The session's counting with ``tokenizer`` (None: the workspace's counter, factor 1):
    the tokenizer counts its system prompt and active context once, and the factor is that
    count over the stored one. The server's reports start anew."""
    if tokenizer is None:
        return Counting(None, 1.0)
    items = await history.context(tx, row["id"])
    real = (tokenizer.count(row["system"]) if row["system"] else 0) + sum(tokenizer.count(i.content) for i in items)
    stored = row["context_tokens"]
    return Counting(tokenizer.name, real / stored if real and stored else 1.0)
