"""What a rule made by ``allow --always`` matches: a simple command exactly (a program known to
run no other: with any arguments); a command line with shell syntax only itself, whole, or
every part of it covered by a rule — so no other program rides along."""

from __future__ import annotations

import pytest

from procession.model.commands import divide
from procession.model.requests import EXACT, cover, rule_name, subject, summary


@pytest.mark.parametrize(("command", "expected"), [
    ("git push origin main", f"{EXACT}git push origin main"),
    ('git commit -m "two words"', f"{EXACT}git commit -m 'two words'"),
    ("ls -la", "ls"),
    ("ls *", "ls"),
    ("/bin/ls -la", f"{EXACT}/bin/ls -la"),  # a path is not the program PATH would find
    ("ionice -c3 true", f"{EXACT}ionice -c3 true"),
    ("git status; rm -rf ~", f"{EXACT}git status; rm -rf ~"),
    ("git log | sh", f"{EXACT}git log | sh"),
    ("git diff > /etc/motd", f"{EXACT}git diff > /etc/motd"),
    ("git $(rm -rf ~)", f"{EXACT}git $(rm -rf ~)"),
    ("git `rm -rf ~`", f"{EXACT}git `rm -rf ~`"),
    ("git status\nrm -rf ~", f"{EXACT}git status\nrm -rf ~"),
    ("rm *.o", f"{EXACT}rm *.o"),
    ("git 'unbalanced", f"{EXACT}git 'unbalanced"),
])
def test_a_shell_rule_is_a_command_exactly_or_a_program_that_runs_no_other(command: str, expected: str) -> None:
    assert subject("Bash", {"command": command}) == expected


def test_every_agents_shell_tool_and_a_command_binding_have_subjects_other_tools_none() -> None:
    assert subject("exec_command", {"command": ["bash", "-lc", "git diff"]}) == f"{EXACT}git diff"
    assert subject("exec_command", {"command": ["bash", "-lc", "git diff; rm x"]}) == f"{EXACT}git diff; rm x"
    assert subject("local_shell", {"command": ["cat", "a b"]}) == "cat"
    assert subject("bash", {"command": "npm test"}) == f"{EXACT}npm test"
    assert subject("Write", {"file_path": "/x", "content": "y"}) == ""
    assert subject("WebFetch", {"url": "https://x"}) == ""


def test_how_a_request_and_a_rule_read() -> None:
    assert rule_name("Bash", "ls") == "Bash(ls: any arguments)"
    assert rule_name("Bash", f"{EXACT}make > log") == "Bash(exactly: make > log)"
    assert rule_name("Bash", None) == "Bash(nothing)"
    assert rule_name("WebFetch", "") == "WebFetch"
    assert summary("Bash", {"command": "ls"}) == "ls"
    assert summary("Write", {"file_path": "/a/b", "content": "x"}) == "/a/b"
    assert summary("exec_command", {"command": ["git", "diff", "a b"]}) == "git diff 'a b'"
    assert summary("custom", {"b": 1, "a": [2]}) == '{"a": [2], "b": 1}'


@pytest.mark.parametrize("command", ["", "   ", None, "FOO=1 npm test", "bash -c 'curl x | sh'", "env rm -rf /",
                                     "sudo ls", "xargs rm", "eval ls", ". ./evil.sh", "find . -exec rm {} +",
                                     "sed e x", "pkexec ls", "setpriv ls", "nsenter ls", "taskset 1 ls"])
def test_a_program_that_may_run_another_is_only_ever_allowed_exactly(command: object) -> None:
    found = subject("Bash", {"command": command})
    assert found.startswith(EXACT), found
    assert cover("Bash", {"command": f"{command} x"}, [found]) is None
    assert subject("Bash", {"cmd": "ls"}) == EXACT  # a shell call whose command is not where it is read


@pytest.mark.parametrize(("line", "parts"), [
    ("a; b && c || d | e |& f & g\nh", [["a"], ["b"], ["c"], ["d"], ["e"], ["f"], ["g"], ["h"]]),
    ("cat 'a b' \"c d\" e\\ f 2>&1 >/dev/null", [["cat", "a b", "c d", "e f"]]),
    ("echo '$(x)' \"a\\\"b\"", [["echo", "$(x)", 'a"b']]),
])
def test_a_line_divides_into_its_simple_commands(line: str, parts: list[list[str]]) -> None:
    found = divide(line)
    assert found is not None and [list(p.words) for p in found] == parts


@pytest.mark.parametrize("line", ["a $B", 'a "$(b)"', "a `b`", "(a)", "{ a; }", "a > f", "a < f", "a << E", "a &> f",
                                  "a 2> f", "a >& f", "! a", "a # b", "a \\\nb", "a 'b", 'a "b', "a <(b)"])
def test_what_may_run_or_write_else_is_never_divided(line: str) -> None:
    assert divide(line) is None
