"""Counting tokens when a message is written.

The count is stored with the message and summed into the session's active-context total,
so no listing ever re-reads messages. Which counter a workspace uses is fixed when the
workspace is created (recorded in its meta table). Should that counter be missing later
(tiktoken uninstalled), the estimator counts new messages and ``counter`` reports that it did.

``bytes/4`` is the default: no real tokenizer is available offline on a fresh machine
(tiktoken downloads its tables on first use). It estimates a message as
``4 + ceil(utf8_bytes / 4)``: four tokens of chat framing (role, separators, as OpenAI's
chat format spends per message) plus one token per four bytes of UTF-8, the usual rule of
thumb for English; for CJK text (three bytes a character) it gives about 0.75 tokens a
character, under the ~1 a real BPE gives, and it says so by its name wherever a count is
shown. When ``tiktoken`` is installed and its ``cl100k_base`` table is already in the
local cache, new workspaces use it instead and are labelled ``tiktoken:cl100k_base``.

A session's own model counts differently, so each session has a factor (``scale``) that its
stored sum is multiplied by wherever its context is shown or checked against its window:
cheap (no message is read again) and the same in every listing. The factor comes from a real
tokenizer for the session's model when one is at hand offline (a Hugging Face
``tokenizer.json`` the user gives, needing the ``tokenizers`` package; tiktoken's encoding for
an OpenAI model, when its table is already cached), which counts the context once when it is
set or the session migrates; then from the server itself: after each model request, what
the server reports it was sent (``usage.prompt_tokens``) over Procession's count of that
request (``calibrate``), a running mean of the first reports and then a moving one, so that
the figure follows what the model really sees. A server's own ``/tokenize`` endpoint is not
asked: a request per message would make writes wait on the network, and its usage reports
give the same count after every request anyway.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..model.errors import InvalidArgument

ESTIMATOR = "bytes/4"
MESSAGE_OVERHEAD = 4
#: The server reports a factor is the running mean of, before it becomes a moving mean of
#: that many (so a change of what a session holds, code after prose, moves it within a few runs).
SMOOTHING = 8
#: tiktoken's tables, by the address it caches each under (their names are the encodings').
_TIKTOKEN_URL = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"

Counter = Callable[[str], int]


@dataclass(frozen=True, slots=True)
class Tokenizer:
    """A real tokenizer: what it is shown as, and its count of one message (with framing)."""

    name: str
    count: Counter


def estimate(text: str) -> int:
    return MESSAGE_OVERHEAD + (len(text.encode("utf-8", "surrogatepass")) + 3) // 4


def _cached(encoding: str) -> bool:
    """Whether tiktoken has ``encoding``'s table on disk (it would download it otherwise)."""
    folder = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR") or str(
        Path(tempfile.gettempdir()) / "data-gym-cache")
    return (Path(folder) / hashlib.sha1(_TIKTOKEN_URL.format(encoding).encode()).hexdigest()).is_file()


def _tiktoken(encoding: str = "cl100k_base") -> Counter | None:
    """``encoding`` from tiktoken, only if it is installed and needs no network."""
    try:
        import tiktoken
    except ImportError:
        return None
    if not _cached(encoding):
        return None
    try:
        enc = tiktoken.get_encoding(encoding)
    except Exception:  # noqa: BLE001 - any failure means "not available offline"
        return None
    return lambda text: MESSAGE_OVERHEAD + len(enc.encode(text, disallowed_special=()))


def choose() -> str:
    """The name of the best counter available here, for a new workspace."""
    return "tiktoken:cl100k_base" if _tiktoken() else ESTIMATOR


def counter(name: str) -> tuple[str, Counter]:
    """The counter a workspace was created with, or the estimator if that one is gone here."""
    if name.startswith("tiktoken:"):
        found = _tiktoken(name.removeprefix("tiktoken:"))
        if found:
            return name, found
    return ESTIMATOR, estimate


def load(spec: str) -> Tokenizer:
    """The tokenizer a user names: a Hugging Face ``tokenizer.json`` file (the one a model's
    repository ships, as llama.cpp, vLLM and Ollama models do) or ``tiktoken:ENCODING`` whose
    table is cached here; refused in one line otherwise."""
    if spec.startswith("tiktoken:"):
        found = _tiktoken(spec.removeprefix("tiktoken:"))
        if found is None:
            raise InvalidArgument(f"{spec} is not available offline here: tiktoken must be installed and its table"
                                  " in its cache ($TIKTOKEN_CACHE_DIR); or give a tokenizer.json file")
        return Tokenizer(spec, found)
    path = Path(spec).expanduser()
    if not path.is_absolute():
        raise InvalidArgument(f"the tokenizer file must be an absolute path: {spec!r}")
    if not path.is_file():
        raise InvalidArgument(f"no tokenizer file at {path} (give a tokenizer.json, or tiktoken:ENCODING)")
    try:
        from tokenizers import Tokenizer as HfTokenizer
    except ImportError:
        raise InvalidArgument("reading a tokenizer.json needs the tokenizers package:"
                              " pip install 'tokenizers>=0.15' (or, in the project's folder,"
                              " pip install '.[tokenizers]')") from None
    try:
        hf = HfTokenizer.from_file(str(path))
    except Exception:  # noqa: BLE001 - the library says little more than "not one"
        raise InvalidArgument(f"{path} is not a tokenizer.json the tokenizers package can read") from None
    return Tokenizer(str(path), lambda text: MESSAGE_OVERHEAD + len(hf.encode(text, add_special_tokens=False).ids))


def for_model(model: str) -> Tokenizer | None:
    """tiktoken's encoding for an OpenAI model's name, when its table is cached here."""
    try:
        import tiktoken.model
        encoding = tiktoken.model.encoding_name_for_model(model)
    except (ImportError, KeyError):
        return None
    found = _tiktoken(encoding)
    return Tokenizer(f"tiktoken:{encoding}", found) if found else None


def scaled(tokens: int, scale: float) -> int:
    """A stored count as the session's model counts it."""
    return tokens if scale == 1.0 else int(tokens * scale + 0.5)  # as SQLite's ROUND (``rows.CONTEXT``)


def calibrate(scale: float, samples: int, reported: int, counted: int, requests: int) -> tuple[float, int]:
    """The factor and its sample count after ``requests`` more model requests, of which the
    server counted ``reported`` prompt tokens where Procession counted ``counted``."""
    if reported <= 0 or counted <= 0 or requests <= 0:
        return scale, samples
    seen = reported / counted
    for _ in range(requests):
        samples += 1
        scale += (seen - scale) / min(samples, SMOOTHING)
    return scale, samples


def describe(base: str, tokenizer: str | None, scale: float, samples: int) -> str:
    """How a session's context figure was counted, in a few words."""
    if tokenizer:
        text = f"{tokenizer} (x{scale:.2f} of {base})"
    else:
        text = base if scale == 1.0 else f"{base} x{scale:.2f}"
    if samples:
        text += f", calibrated over {samples} model request{'s' if samples != 1 else ''}"
    return text
