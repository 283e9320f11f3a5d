"""Trigger kinds: what may wake a session, checked when the trigger is added.

A trigger is stored as a kind and a JSON spec. ``parse`` turns the user's words into that
spec and refuses anything malformed, so the engine that fires triggers never meets a bad
one. Paths of a watch are made absolute against the session's folder at this point, and a
watch inside a folder the watcher ignores (``.git``, ``node_modules``...) is refused with
what to do instead. A commit trigger's words are checked here; its repository is looked up
(with git) by the call that adds it.
"""

from __future__ import annotations

import re
from pathlib import Path
from collections.abc import Sequence
from typing import Any, Final

from .errors import InvalidArgument

KINDS: Final = ("watch", "cron", "every", "inbox", "after", "commit")
#: What each kind takes after it, and when it fires (the CLI's and the MCP tool's help).
TAKES: Final = {
    "watch": "PATH|GLOB... (a file or folder changed)",
    "cron": '"EXPR" (five fields, local time: "0 9 1 * *")',
    "every": "DURATION (30s, 5m, 1h30m, 2d)",
    "inbox": "nothing (a message arrived)",
    "after": "SID (that session ended its run)",
    "commit": "[REPO] (a new commit; default: the session's folder's repository)",
}
DEFAULT_DEBOUNCE_MS: Final = 500
#: A commit trigger's debounce: the ref updates of one pull, rebase or burst of commits land
#: within it and fire once, and a commit still wakes its session well under 200 ms.
DEFAULT_COMMIT_DEBOUNCE_MS: Final = 100
#: Folders tools fill with churn, which the file watcher never walks nor watches (a superset
#: of watchfiles' ``DefaultFilter.ignore_dirs``, which a test checks). A watch inside one
#: could never fire, so it is refused.
IGNORED_DIRS: Final = frozenset({".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv", ".tox", ".idea",
                                 ".mypy_cache", ".pytest_cache", ".hypothesis"})
MIN_EVERY_S: Final = 1.0
MAX_EVERY_S: Final = 10 * 365 * 86400.0

_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def duration(text: str) -> float:
    """Seconds in ``90s``, ``5m``, ``1h30m``, ``2d``, ``250ms``."""
    compact = text.strip().replace(" ", "")
    parts = _DURATION.findall(compact)
    if not parts or "".join(n + u for n, u in parts) != compact:
        raise InvalidArgument(f"bad duration {text!r}: use forms like 30s, 5m, 1h30m, 2d")
    return sum(float(n) * _UNIT[u] for n, u in parts)


def parse(kind: str, args: list[str], *, cwd: str, debounce_ms: int | None = None, branch: str | None = None,
          paths: Sequence[str] = ()) -> dict[str, Any]:
    """The stored spec of a trigger of ``kind`` given the CLI's words ``args`` (and, for a
    commit trigger, its ``branch`` and ``paths`` globs; for a commit trigger the spec still
    lacks what git says of the repository: ``calls.bindings`` adds it)."""
    if kind not in KINDS:
        raise InvalidArgument(f"unknown trigger kind {kind!r}; kinds are {', '.join(KINDS)}")
    if kind not in ("watch", "commit") and debounce_ms is not None:
        raise InvalidArgument("--debounce applies to watch and commit triggers only")
    if kind != "commit" and (branch is not None or paths):
        raise InvalidArgument("--branch and --path apply to commit triggers only")
    match kind:
        case "watch":
            if not args:
                raise InvalidArgument("watch needs at least one path or glob")
            found = [absolute(p, cwd) for p in args]
            for path in found:
                ignored(path)
            return {"paths": found, "debounce_ms": _debounce(debounce_ms, DEFAULT_DEBOUNCE_MS)}
        case "commit":
            if len(args) > 1:
                raise InvalidArgument("commit takes at most one repository folder (default: the session's folder)")
            if branch is not None and (not branch.strip() or any(c in branch for c in " ~^:?[\\\x00\n")
                                       or (branch != "*" and "*" in branch)):
                raise InvalidArgument(f"bad branch {branch!r}: give a branch name, or '*' for every branch")
            return {"repo": absolute(args[0] if args else cwd, cwd), "branch": branch,
                    "paths": [repo_glob(p) for p in paths],
                    "debounce_ms": _debounce(debounce_ms, DEFAULT_COMMIT_DEBOUNCE_MS)}
        case "cron":
            if len(args) != 1:
                raise InvalidArgument('cron takes one expression, quoted: cron "0 9 1 * *"')
            from croniter import croniter

            if not croniter.is_valid(args[0]):
                raise InvalidArgument(f"bad cron expression {args[0]!r}")
            return {"expr": args[0]}
        case "every":
            if len(args) != 1:
                raise InvalidArgument("every takes one duration, like 5m")
            seconds = duration(args[0])
            if not MIN_EVERY_S <= seconds <= MAX_EVERY_S:
                raise InvalidArgument(f"every must be between {MIN_EVERY_S:g}s and 3650d")
            return {"seconds": seconds, "text": args[0]}
        case "inbox":
            if args:
                raise InvalidArgument("inbox takes no argument")
            return {}
        case _:  # after
            if len(args) != 1 or not args[0].isdigit():
                raise InvalidArgument("after takes one session id")
            return {"session": int(args[0])}


def _debounce(given: int | None, default: int) -> int:
    debounce = default if given is None else given
    if not 0 <= debounce <= 3_600_000:
        raise InvalidArgument("--debounce must be between 0 and 3600000 ms")
    return debounce


def ignored(path: str) -> None:
    """Refuse a watch inside a folder the watcher ignores, saying what would work."""
    for part in Path(path).parts:
        if part == ".git":
            repo = path[:path.index("/.git")] or "/"
            if not Path(repo, ".git").exists():  # no repository there: a commit trigger would be refused too
                raise InvalidArgument(f"{path} is inside .git, which the watcher ignores; {repo} is not a git"
                                      " repository either: watch the files you mean")
            raise InvalidArgument(f"{path} is inside .git, which the watcher ignores: to wake on commits, use a"
                                  f" commit trigger (trigger add SID commit {repo})")
        if part in IGNORED_DIRS:
            raise InvalidArgument(f"{path} is inside {part}, which the watcher ignores (tools fill it with churn):"
                                  " watch the files you mean outside it")


def repo_glob(pattern: str) -> str:
    """A ``--path`` glob, relative to the repository's top folder (``src/**``, ``*.md``)."""
    text = pattern.strip()
    while text.startswith("./"):
        text = text[2:]
    if not text or "\x00" in text or text.startswith("/") or ".." in Path(text).parts:
        raise InvalidArgument(f"bad --path {pattern!r}: give a glob relative to the repository's top, like 'src/**'")
    return text.rstrip("/")


def absolute(path: str, cwd: str) -> str:
    """``path`` made absolute against ``cwd`` and normalised; globs are kept as globs."""
    if not path or "\x00" in path:
        raise InvalidArgument(f"bad path {path!r}")
    p = Path(path).expanduser()
    if not p.is_absolute():
        p = Path(cwd) / p
    parts: list[str] = []
    for part in p.parts:
        if part == "..":
            if len(parts) > 1:
                parts.pop()
        elif part != ".":
            parts.append(part)
    return str(Path(*parts))


def revalidate(kind: str, spec: Any) -> dict[str, Any]:
    """A stored spec (from a snapshot file, say) checked as if the user had typed it."""
    if not isinstance(spec, dict):
        raise InvalidArgument(f"bad {kind} trigger spec")
    try:
        match kind:
            case "watch":
                if not isinstance(spec["paths"], list):
                    raise TypeError
                return parse(kind, spec["paths"], cwd="/", debounce_ms=spec.get("debounce_ms"))
            case "cron":
                return parse(kind, [spec["expr"]], cwd="/")
            case "every":
                return parse(kind, [spec["text"]], cwd="/")
            case "inbox":
                return parse(kind, [], cwd="/")
            case "after":
                return parse(kind, [str(spec["session"])], cwd="/")
            case "commit":
                if not isinstance(spec["paths"], list) or not isinstance(spec["git"], str):
                    raise TypeError
                parsed = parse(kind, [spec["repo"]], cwd="/", debounce_ms=spec.get("debounce_ms"),
                               branch=spec["branch"], paths=spec["paths"])
                if parsed["branch"] is None or not spec["git"].startswith("/"):
                    raise TypeError
                return {**parsed, "git": absolute(spec["git"], "/")}
            case _:
                return parse(kind, [], cwd="/")
    except (KeyError, TypeError, AttributeError):
        raise InvalidArgument(f"bad {kind} trigger spec") from None
