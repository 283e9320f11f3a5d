"""Procession's own git reads no program from the repository's own configuration: a step may
write the ``.git`` of the folder it works in, so what that configuration (and any file it
includes) names must not run when a person forks the session into a worktree and merges it
back. Each test plants programs that append to a marker file, then makes the real calls;
real git, real repositories, a HOME of the test's own."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from procession import Workspace
from procession.calls import gitrepo
from procession.model.errors import ProcessionError
from support.git import Repo, git_identity, quiet_env, session_in  # noqa: F401  (the fixture, used by every test here)

pytestmark = pytest.mark.usefixtures("git_identity")


def program(tmp_path: Path) -> tuple[str, Path]:
    """A program that says it ran (in the marker file it returns with it), wherever git runs it."""
    ran, path = tmp_path / "ran", tmp_path / "program.sh"
    path.write_text(f"#!/bin/sh\necho \"ran $*\" >> {ran}\n")
    path.chmod(0o755)
    return str(path), ran


def plainly(folder: Path, message: str, cleared: list[str]) -> None:
    """The test's own commit of everything in ``folder``, with the planted keys ``cleared``
    (empty) on its command line: the test's git runs none of them either."""
    pairs = {"GIT_CONFIG_COUNT": str(len(cleared))}
    for n, key in enumerate(cleared):
        pairs[f"GIT_CONFIG_KEY_{n}"], pairs[f"GIT_CONFIG_VALUE_{n}"] = key, ""
    for args in (["add", "-A"], ["commit", "-qm", message]):
        subprocess.run(["git", *args], cwd=folder, check=True, env={**quiet_env(), **pairs})


async def fork_and_merge(ws: Workspace, repo: Repo, cleared: list[str]) -> None:
    """A fork into a worktree that commits a change to the first line of ``a.txt`` while its
    parent commits one to the last (git merges the file three ways), merged back."""
    parent = await session_in(ws, repo.path)
    forked = await ws.fork(parent, worktree=True)
    fork = Path(forked.worktree or "")
    (fork / "a.txt").write_text("ONE\n2\n3\n")
    plainly(fork, "the fork's", cleared)
    (repo.path / "a.txt").write_text("1\n2\nTHREE\n")
    plainly(repo.path, "the parent's", cleared)
    await ws.merge(forked.sid, parent)
    assert repo.read("a.txt") == "ONE\n2\nTHREE\n"


async def test_a_signing_key_command_the_repository_names_never_runs(ws, tmp_path):
    """Signing on, in the ssh format, with the command git asks for a default key: git's
    commit runs that command, and the merge's commit is Procession's own."""
    run, ran = program(tmp_path)
    repo = Repo.init(tmp_path / "repo", {"a.txt": "1\n2\n3\n"})
    for key, value in {"commit.gpgsign": "true", "gpg.format": "ssh", "gpg.ssh.defaultKeyCommand": run}.items():
        repo.git("config", key, value)
    await fork_and_merge(ws, repo, ["commit.gpgsign"])
    assert not ran.exists()
    assert "gpgsig" not in repo.git("cat-file", "commit", "HEAD")  # the repository's signing is not read


#: Programs a step could name in its repository's configuration (``{program}``: one that says it
#: ran), picked by the attributes every test repository has (``a.txt filter=x diff=x merge=x``).
PLANTED = {
    "file system monitor": {"core.fsmonitor": "{program}"},
    "ssh command": {"core.sshCommand": "{program}"},
    "filter": {"filter.x.clean": "{program}", "filter.x.smudge": "{program}", "filter.x.process": "{program}"},
    "diff driver": {"diff.x.command": "{program}", "diff.x.textconv": "{program}", "diff.external": "{program}"},
    "editor and pager": {"core.editor": "{program}", "core.pager": "{program}", "sequence.editor": "{program}"},
    "a key git may add": {"core.someNewProgram": "!{program}"},
}


def attributed(tmp_path: Path) -> Repo:
    return Repo.init(tmp_path / "repo", {"a.txt": "1\n2\n3\n", ".gitattributes": "a.txt filter=x diff=x merge=x\n"})


def not_read(repo: Repo, planted: dict[str, str]) -> None:
    """Procession's own git, asked for each planted key, does not get the value planted."""
    for key, value in planted.items():
        assert gitrepo.run(str(repo.path), "config", "--get", key, check=False).stdout.decode().strip() != value


@pytest.mark.parametrize("planted", PLANTED.values(), ids=PLANTED.keys())
async def test_no_program_the_repositorys_configuration_names_runs(ws, tmp_path, planted):
    run, ran = program(tmp_path)
    planted = {key: value.format(program=run) for key, value in planted.items()}
    repo = attributed(tmp_path)
    for key, value in planted.items():
        repo.git("config", key, value)
    await fork_and_merge(ws, repo, list(planted))
    assert not ran.exists()
    not_read(repo, planted)


async def test_a_clone_and_a_worktree_of_it_fork_and_merge_as_ever(ws, tmp_path):
    """What ``git clone`` and ``git worktree add`` write (remotes, tracked branches, a linked
    worktree's own git folder) is read, or harmless unread: an ordinary repository works."""
    origin = attributed(tmp_path)
    subprocess.run(["git", "clone", "-q", str(origin.path), str(tmp_path / "clone")], check=True, env=quiet_env())
    Repo(tmp_path / "clone").git("worktree", "add", "-q", "-b", "side", str(tmp_path / "side"))
    await fork_and_merge(ws, Repo(tmp_path / "side"), [])


async def test_no_program_a_file_the_configuration_includes_names_runs(ws, tmp_path):
    """The included file is one a step wrote; signing in the openpgp format runs its program."""
    run, ran = program(tmp_path)
    planted = {"core.fsmonitor": run, "filter.x.clean": run, "filter.x.smudge": run, "commit.gpgsign": "true",
               "gpg.program": run, "gpg.ssh.defaultKeyCommand": run}
    included = tmp_path / "included"
    for key, value in planted.items():
        subprocess.run(["git", "config", "--file", str(included), key, value], check=True)
    repo = attributed(tmp_path)
    repo.git("config", "include.path", str(included))
    await fork_and_merge(ws, repo, list(planted))
    assert not ran.exists()
    assert "gpgsig" not in repo.git("cat-file", "commit", "HEAD")
    not_read(repo, planted)


async def test_a_merge_driver_the_repository_names_fails_the_merge_instead(ws, tmp_path):
    run, ran = program(tmp_path)
    repo = attributed(tmp_path)
    repo.git("config", "merge.x.driver", run)
    before = repo.head()
    with pytest.raises(ProcessionError):  # git's three-way merge of a.txt would run it
        await fork_and_merge(ws, repo, ["merge.x.driver"])
    assert not ran.exists()
    assert repo.head("HEAD~1") == before and repo.git("status", "--porcelain") == ""  # the parent's commit only


async def test_an_include_on_a_condition_is_refused(ws, tmp_path):
    """Listed on the parent's branch, the condition is false; the fork's new worktree is checked
    out on its own branch, where it holds: its filter would run there."""
    run, ran = program(tmp_path)
    included = tmp_path / "included"
    subprocess.run(["git", "config", "--file", str(included), "filter.x.smudge", run], check=True)
    repo = attributed(tmp_path)
    repo.git("config", "includeIf.onbranch:procession/**.path", str(included))
    parent = await session_in(ws, repo.path)
    with pytest.raises(ProcessionError, match=r"^the repository's own configuration includes a file on a condition "
                                              r"\(includeif\.onbranch:procession/\*\*\.path\)"):
        await ws.fork(parent, worktree=True)
    assert not ran.exists() and not (tmp_path / "repo.forks").exists()


async def test_a_worktree_elsewhere_is_refused_and_its_own_folder_is_not(ws, tmp_path):
    """``core.worktree`` would have Procession's git check out, merge and read in another
    folder, outside the session's; naming the repository's own folder, it changes nothing."""
    repo = attributed(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    parent = await session_in(ws, repo.path)
    repo.git("config", "core.worktree", str(elsewhere))
    with pytest.raises(ProcessionError, match=r"^the repository's own configuration sets core.worktree to "
                                              rf"{elsewhere}, which is not the repository's own folder"):
        await ws.fork(parent, worktree=True)
    assert list(elsewhere.iterdir()) == [] and not (tmp_path / "repo.forks").exists()
    repo.git("config", "core.worktree", "..")  # relative to the .git folder: the repository's own
    await fork_and_merge(ws, repo, [])


async def test_no_program_a_submodules_own_configuration_names_runs(ws, tmp_path):
    """A submodule's configuration is in the superproject's ``.git`` (``modules/``), which a step
    may write; the ``status`` a fork and a merge read would have git look into the modified
    submodule with a git of its own, which cleans its file through the filter named there."""
    run, ran = program(tmp_path)
    Repo.init(tmp_path / "library", {"f.txt": "x\n", ".gitattributes": "* filter=x\n"})
    repo = attributed(tmp_path)
    repo.git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(tmp_path / "library"), "library")
    repo.git("commit", "-qm", "the library")
    sub = Repo(repo.path / "library")
    sub.git("config", "filter.x.clean", run)
    (sub.path / "f.txt").write_text("changed in the submodule\n")
    parent = await session_in(ws, repo.path)
    forked = await ws.fork(parent, worktree=True)
    fork = Path(forked.worktree or "")
    (fork / "a.txt").write_text("ONE\n2\n3\n")
    plainly(fork, "the fork's", [])  # the test's own git, where no submodule is checked out
    await ws.merge(forked.sid, parent)
    assert repo.read("a.txt") == "ONE\n2\n3\n" and not ran.exists()


@pytest.mark.parametrize("url, key, value", [("ssh://example.invalid/", "core.sshCommand", "{program}"),
                                             ("git://example.invalid/", "core.gitProxy", "{program}"),
                                             ("ext::{program} %S ", "protocol.ext.allow", "always")],
                         ids=["ssh", "git proxy", "ext"])
async def test_a_fetch_reaches_no_repository_but_by_a_file(tmp_path, url, key, value):
    """A move fetches its bundle by path; the repository's configuration may rewrite that path
    to a URL whose transport runs a program it names (``core.gitProxy`` is a list whose first
    value wins: a value on the command line cannot take it back)."""
    run, ran = program(tmp_path)
    repo = Repo.init(tmp_path / "repo")
    bundle = tmp_path / "main.bundle"
    repo.git("bundle", "create", str(bundle), "main")
    repo.git("config", f"url.{url.format(program=run)}.insteadOf", "/")
    repo.git("config", key, value.format(program=run))
    refused = r"^fatal: (transport '\w+' not allowed|unknown value for config 'protocol.ext.allow': \(.*\))$"
    with pytest.raises(gitrepo.GitError, match=refused):
        gitrepo.run(str(repo.path), "fetch", "-q", str(bundle), "main:refs/heads/brought")
    assert not ran.exists()
    repo.git("config", "--unset", f"url.{url.format(program=run)}.insteadOf")
    gitrepo.run(str(repo.path), "fetch", "-q", str(bundle), "main:refs/heads/brought")
    assert repo.head("brought") == repo.head()


def own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: dict[str, str]) -> None:
    """A HOME of the test's own whose ``.gitconfig`` holds ``settings`` (none: no file), no
    system configuration and no identity in the environment: only what the test sets applies."""
    home = tmp_path / "home"
    home.mkdir()
    for key, value in settings.items():
        subprocess.run(["git", "config", "--file", str(home / ".gitconfig"), key, value], check=True)
    for name in ("GIT_CONFIG_GLOBAL", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME",
                 "GIT_COMMITTER_EMAIL", "EMAIL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


async def test_the_users_own_configuration_still_applies(ws, tmp_path, monkeypatch):
    """A HOME of the test's own: its identity signs the merge's commit, and its filter (as
    Git LFS's is) runs where the repository's own configuration names another for the same
    driver, whose program does not."""
    run, ran = program(tmp_path)
    users = tmp_path / "users-filter-ran"
    own_home(tmp_path, monkeypatch, {"user.name": "Their Name", "user.email": "them@example.invalid",
                                     "filter.x.smudge": f"sh -c 'echo smudged >> {users}; cat'",
                                     "filter.x.clean": "cat"})
    repo = attributed(tmp_path)
    repo.git("config", "filter.x.smudge", run)
    await fork_and_merge(ws, repo, ["filter.x.smudge"])
    assert not ran.exists()
    assert users.read_text().startswith("smudged\n")  # the fork's worktree was checked out through it
    assert repo.git("log", "-1", "--format=%an <%ae>") == "Their Name <them@example.invalid>"


async def test_with_no_identity_anywhere_procession_authors_its_merge_commit(ws, tmp_path, monkeypatch):
    """No identity in any configuration or in the environment (git's own commit would fail:
    ``unable to auto-detect email address``): the merge's commit is Procession's, named for
    the session merged, and its dry run has nothing to warn of. An identity the repository's
    own configuration gives is the user's, and then the commit is theirs."""
    own_home(tmp_path, monkeypatch, {})
    repo = Repo.init(tmp_path / "repo", {"a.txt": "1\n2\n3\n"})
    parent = await session_in(ws, repo.path)
    for mine in (False, True):
        if mine:
            repo.git("config", "user.name", "In The Repository")
            repo.git("config", "user.email", "repo@example.invalid")
        forked = await ws.fork(parent, worktree=True)
        Repo(Path(forked.worktree or "")).commit({"a.txt": f"{mine}\n2\n3\n"}, "the fork's")
        repo.commit({f"{mine}.txt": "the parent's\n"}, "the parent's")
        plan = await ws.merge_plan(forked.sid, parent)
        assert plan.clean and plan.files is not None and plan.files.changes == (("M", "a.txt"),)
        assert (await ws.merge(forked.sid, parent)).commit == repo.head()
        assert repo.read("a.txt") == f"{mine}\n2\n3\n"
        assert repo.git("log", "-1", "--format=%an <%ae>|%cn <%ce>") == (
            "In The Repository <repo@example.invalid>|In The Repository <repo@example.invalid>" if mine else
            f"Procession (session {forked.sid}) <procession@localhost>|Procession (session {forked.sid})"
            " <procession@localhost>")


async def test_a_key_git_cannot_take_empty_fails_in_one_line_naming_it(ws, tmp_path):
    repo = attributed(tmp_path)
    repo.git("config", "merge.renameLimit", "5000")
    with pytest.raises(ProcessionError) as failed:
        await fork_and_merge(ws, repo, [])
    assert "\n" not in str(failed.value)
    assert str(failed.value).endswith("(Procession's own git does not read the repository's own merge.renamelimit:"
                                      " set it in your own configuration, e.g. git config --global)")


async def test_a_key_written_after_the_listing_still_runs_nothing(ws, tmp_path, monkeypatch):
    """Found by an attack pass: a running step rewrote ``.git/config`` between Procession's
    listing of it and the call, racing a fork it asked for; the key it added was read unlisted.
    Here the listing is made to miss the planted filter (as the race did), and the call is
    still held to running git alone: the program cannot start."""
    run, ran = program(tmp_path)
    repo = Repo.init(tmp_path / "repo", {"a.txt": "1\n2\n3\n", ".gitattributes": "a.txt filter=evil\n"})
    repo.git("config", "filter.evil.clean", run)
    (repo.path / "a.txt").write_text("changed\n")
    monkeypatch.setattr(gitrepo, "_unread", lambda settings: {})  # the listing saw nothing to override
    if gitrepo._landlock() < 1:
        pytest.skip("this kernel has no Landlock to hold git to running git alone")
    gitrepo.uncommitted(str(repo.path))
    assert not ran.exists()
