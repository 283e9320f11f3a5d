"""What a rule made by ``allow --always`` matches: a simple command's program, as written; a
command line with shell syntax only itself, whole — so no other program rides along."""

from __future__ import annotations

import pytest

from procession.model.requests import EXACT, rule_name, subject, summary


@pytest.mark.parametrize(("command", "expected"), [
    ("git push origin main", "git"),
    ('git commit -m "two words"', "git"),
    ("/usr/bin/make test", "/usr/bin/make"),  # a path is not the program PATH would find
    ("git status; rm -rf ~", f"{EXACT}git status; rm -rf ~"),
    ("git log | sh", f"{EXACT}git log | sh"),
    ("git diff > /etc/motd", f"{EXACT}git diff > /etc/motd"),
    ("git $(rm -rf ~)", f"{EXACT}git $(rm -rf ~)"),
    ("git `rm -rf ~`", f"{EXACT}git `rm -rf ~`"),
    ("git status && curl x", f"{EXACT}git status && curl x"),
    ("git status\nrm -rf ~", f"{EXACT}git status\nrm -rf ~"),
    ("ls *", f"{EXACT}ls *"),
    ("git 'unbalanced", f"{EXACT}git 'unbalanced"),
])
def test_a_shell_rule_matches_a_program_or_one_whole_command_line(command: str, expected: str) -> None:
    assert subject("Bash", {"command": command}) == expected


def test_every_agents_shell_tool_and_a_command_binding_have_subjects_other_tools_none() -> None:
    assert subject("exec_command", {"command": ["bash", "-lc", "git diff"]}) == "git"
    assert subject("exec_command", {"command": ["bash", "-lc", "git diff; rm x"]}) == f"{EXACT}git diff; rm x"
    assert subject("local_shell", {"command": ["git", "diff"]}) == "git"
    assert subject("bash", {"command": "npm test"}) == "npm"
    assert subject("Write", {"file_path": "/x", "content": "y"}) == ""
    assert subject("WebFetch", {"url": "https://x"}) == ""


def test_how_a_request_and_a_rule_read() -> None:
    assert rule_name("Bash", "git") == "Bash(git)"
    assert rule_name("Bash", f"{EXACT}make > log") == "Bash(exactly: make > log)"
    assert rule_name("WebFetch", "") == "WebFetch"
    assert summary("Bash", {"command": "ls"}) == "ls"
    assert summary("Write", {"file_path": "/a/b", "content": "x"}) == "/a/b"
    assert summary("exec_command", {"command": ["git", "diff", "a b"]}) == "git diff 'a b'"
    assert summary("custom", {"b": 1, "a": [2]}) == '{"a": [2], "b": 1}'


@pytest.mark.parametrize("command", ["", "   ", None, "FOO=1 npm test", "bash -c 'curl x | sh'", "env rm -rf /",
                                     "sudo ls", "xargs rm", "eval ls", ". ./evil.sh"])
def test_an_empty_command_an_assignment_or_a_wrapper_is_never_a_rule_for_any_command(command: object) -> None:
    found = subject("Bash", {"command": command})
    assert found.startswith(EXACT) and found != "", found
    assert subject("Bash", {"cmd": "ls"}) == EXACT  # a shell call whose command is not where it is read
    assert subject("exec_command", {"command": ["bash", "--norc", "-c", "x"]}).startswith(EXACT)
