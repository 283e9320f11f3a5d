"""The commands of ``procession``: each declared where its handler is, with its options on it.

A handler is registered with ``@command``, which lists its arguments, as sqlite-utils keeps
each command's options on the command itself; the parser is built from the registry. A command that
makes a system call names it (``@command(Call.FORK)``): its verb and its help are the call's
own (``procession.model.calls``), which is how the suite checks that every call of the
table has a command. Commands with operations (``trigger add``, ``memory SID set``) declare
them as ``ops``: arguments each operation takes after the command's own.

The same declarations describe the MCP server's tools (``procession.cli.mcp``): an ``Arg``
gives its JSON schema (``Arg.schema``), from its type, ``nargs``, ``action``, ``choices``,
default and help; what only a shell user needs to read (``-`` reads standard input) is its
``shell`` part, shown by the CLI's help alone.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from procession.model.calls import INFO, Call

Handler = Callable[..., Awaitable[int]]
PROG = "procession"
INT64 = 2**63 - 1


@dataclass(slots=True, frozen=True)
class Arg:
    flags: tuple[str, ...]
    options: dict[str, Any]
    shell: str = ""  # help for a shell user only, after the help proper

    @property
    def dest(self) -> str:
        """The argument's name in the parsed namespace (and as a tool's property)."""
        if "dest" in self.options:
            return str(self.options["dest"])
        long = next((f for f in self.flags if f.startswith("--")), self.flags[0])
        return long.lstrip("-").replace("-", "_")

    @property
    def required(self) -> bool:
        if self.flags[0].startswith("-"):
            return bool(self.options.get("required", False))
        return self.options.get("nargs") not in ("?", "*")

    @property
    def help(self) -> str:
        return str(self.options.get("help") or "")

    def cli_options(self) -> dict[str, Any]:
        """What ``add_argument`` takes: the options, the help with its shell part."""
        if not self.shell:
            return self.options
        return self.options | {"help": f"{self.help}; {self.shell}" if self.help else self.shell}

    def schema(self) -> dict[str, Any]:
        """The JSON schema of the argument's value, as a tool's input schema holds it."""
        action = self.options.get("action")
        if action == "store_true":
            return {"type": "boolean", "default": False, **self._described()}
        item = dict(TYPE_SCHEMAS.get(self.options.get("type"), {"type": "string"}))
        if "choices" in self.options:
            item["enum"] = list(self.options["choices"])
        nargs = self.options.get("nargs")
        if action == "append" or nargs in ("+", "*"):
            out: dict[str, Any] = {"type": "array", "items": item, **({"minItems": 1} if nargs == "+" else {})}
        else:
            out = item
        default = self.options.get("default")
        if default is not None and default is not argparse.SUPPRESS:
            out["default"] = default
        return out | self._described()

    def _described(self) -> dict[str, Any]:
        words = self.help or TYPE_WORDS.get(self.options.get("type"), "")
        metavar = self.options.get("metavar")
        if metavar and not self.help:
            words = f"{words} ({metavar})" if words else str(metavar)
        return {"description": words} if words else {}


@dataclass(slots=True)
class Command:
    name: str
    help: str
    handler: Handler
    call: Call | None
    args: list[Arg] = field(default_factory=list)
    ops: dict[str, list[Arg]] = field(default_factory=dict)
    default_op: str | None = None  # the operation when none is given
    workspace: bool = True  # the handler takes an open workspace
    creates: bool = False  # it may make a new workspace (any other on a missing file is a typo)
    patient: bool = False  # a daemon: it waits for a database that cannot be reached yet


COMMANDS: dict[str, Command] = {}


def arg(*flags: str, shell: str = "", **options: Any) -> Arg:
    return Arg(flags, options, shell)


def command(name: str | Call, help: str | None = None, *, args: list[Arg] | None = None,
            ops: dict[str, list[Arg]] | None = None, default_op: str | None = None, workspace: bool = True,
            creates: bool = False, patient: bool = False) -> Callable[[Handler], Handler]:
    """Register ``handler`` as the command ``name`` (a call's name, or a read's verb)."""
    call = name if isinstance(name, Call) else None
    text = help or (INFO[call].summary if call else "")

    def wrap(handler: Handler) -> Handler:
        COMMANDS[str(name)] = Command(str(name), text, handler, call, list(args or ()), dict(ops or {}),
                                      default_op, workspace, creates, patient)
        return handler

    return wrap


# ---------------------------------------------------------------- argument types


def sid_type(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) <= INT64:
        raise argparse.ArgumentTypeError(f"not a valid id: {text!r}")
    return int(text)


def count_type(text: str) -> int:
    """A whole number of things, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 0 < value <= INT64:
        raise argparse.ArgumentTypeError(f"must be 1 or more: {text!r}")
    return value


#: The JSON schema of each argument type's values, and what a value of it is, for tools.
TYPE_SCHEMAS: dict[Any, dict[str, Any]] = {
    sid_type: {"type": "integer", "minimum": 1, "maximum": INT64},
    count_type: {"type": "integer", "minimum": 1, "maximum": INT64},
    int: {"type": "integer"},
    float: {"type": "number"},
}
TYPE_WORDS: dict[Any, str] = {sid_type: "a session id (SID)", count_type: "how many (1 or more)"}

SID = arg("sid", type=sid_type)
SIDS = arg("sids", type=sid_type, nargs="+", metavar="SID")


# ---------------------------------------------------------------- the parser


class _Intermixed(argparse.ArgumentParser):
    """A command's parser that takes its options before, between or after its positionals
    (``adopt claude --agent app ID``): argparse's own parser gives an optional positional up
    once an option comes first. A command with operations parses the usual way (argparse
    cannot intermix a subparser)."""

    _intermixing = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if self._intermixing or any(a.nargs == argparse.PARSER for a in self._actions):
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", metavar="PATH|URL", default=argparse.SUPPRESS,
                        help="workspace file, or postgresql:// address (default: $PROCESSION_DB or the user data"
                             " folder)")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON for scripts")
    common.add_argument("--host", metavar="NAME", default=argparse.SUPPRESS,
                        help="the host this is, in a workspace several machines share (default: $PROCESSION_HOST"
                             " or the machine's name): sessions spawned here belong to it, an engine runs its own")
    parser = argparse.ArgumentParser(prog=PROG, parents=[common],
                                     description="Agent sessions as processes. With no command, opens the monitor.")
    watching = parser.add_mutually_exclusive_group()  # a read-only monitor runs no engine
    watching.add_argument("--readonly", action="store_true", help="a monitor that changes nothing")
    watching.add_argument("--engine", action="store_true", default=None,
                          help="the monitor runs this host's engine on a shared (PostgreSQL) workspace too, unless"
                               " another process does; on a workspace file it always does")
    parser.add_argument("--theme", help="the monitor's colour theme")
    sub: Any = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Intermixed)
    for cmd in COMMANDS.values():
        p = sub.add_parser(cmd.name, parents=[common], help=cmd.help, description=cmd.help)
        p.set_defaults(command_=cmd, parser_=p)  # a mistake found later is told with its own usage
        for a in cmd.args:
            p.add_argument(*a.flags, **a.cli_options())
        if cmd.ops:
            ops = p.add_subparsers(dest="op", required=cmd.default_op is None)  # lists the operations
            p.set_defaults(op=cmd.default_op)
            for op, op_args in cmd.ops.items():
                o = ops.add_parser(op, parents=[common])
                o.set_defaults(parser_=o)
                for a in op_args:
                    o.add_argument(*a.flags, **a.cli_options())
    return parser
