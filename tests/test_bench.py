"""Every benchmark runs at its tiny size, so that none rots (the figures are in bench/)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_chaos_tiny_loses_nothing(store: str, request: pytest.FixtureRequest) -> None:
    if store == "postgresql":
        request.getfixturevalue("postgres")  # skipped (or failed, where it is required) without the server
    proc = subprocess.run([sys.executable, str(BENCH / "chaos.py"), "--tiny", "--store", store], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "lost: 0" in proc.stdout.splitlines()[-1]


def test_agents_tiny_measures_each_cli_it_was_given() -> None:
    from support.agent_clis import require_cli

    for name in ("claude", "codex"):
        require_cli(name)  # skipped (or failed, where they are required) without the CLIs
    proc = subprocess.run([sys.executable, str(BENCH / "agents.py"), "--tiny", "--only", "claude,codex"],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not figures["missing"]
    for name in ("claude", "codex"):
        assert 0 < figures["results"][f"{name}_activate_first_request"]["median"] < 60


def test_acp_tiny_measures_an_agent_over_acp_and_headless() -> None:
    from support.agent_clis import require_cli

    for name in ("codex", "codex-acp"):
        require_cli(name)  # skipped (or failed, where they are required) without the agent and its adapter
    proc = subprocess.run([sys.executable, str(BENCH / "acp.py"), "--tiny", "--only", "codex"],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not figures["missing"]
    for key in ("codex_acp_first_request", "codex_headless_first_request", "codex_acp_done"):
        assert 0 < figures["results"][key]["median"] < 120


def test_engine_tiny_measures_every_figure() -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "engine.py"), "--tiny"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert figures["env"]["mode"] == "tiny" and figures["throughput"]["outcomes"] == {"ok": 10}
    storm = figures["storm"]  # the calls made during it all answered; the debounce held
    assert len(storm["calls_ms"]) == 10 and 1 <= storm["wakes"] <= storm["windows"] + 1, storm


def test_mcp_server_tiny_measures_every_round_trip() -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "mcp_server.py"), "--tiny"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads(proc.stdout[proc.stdout.index("\n{") + 1:])
    assert report["mode"] == "tiny"
    figures = report["results"]
    assert set(figures) == {"call_ps", "call_show", "call_send", "call_memory_set", "call_wait", "call_refused",
                            "start"}
    assert all(len(f["runs"]) == 25 for k, f in figures.items() if k != "start")
    assert all(0 < f["median"] < 5 for f in figures.values())


def test_core_tiny_measures_every_figure() -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "core.py"), "--tiny"], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads(proc.stdout[proc.stdout.index("\n{") + 1:])
    assert report["mode"] == "tiny"
    figures = report["results"]
    assert {"fork_cli_ratio", "send_jsonl_cli", "ps_cli", "show_cli", "compress_cli"} <= set(figures), sorted(figures)
    assert all(f["median"] > 0 for f in figures.values())


def test_monitor_tiny_measures_every_figure() -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "monitor.py"), "--tiny"], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads(proc.stdout[proc.stdout.index("\n{") + 1:])
    assert report["mode"] == "tiny"
    assert {"paint_100", "tick_loop_100", "tick_sort_100", "tick_tree_100", "rss_peak_100", "idle_cpu_100"} <= set(
        report["results"]), sorted(report["results"])


def test_soak_tiny_runs_its_sessions_and_keeps_the_store_whole() -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "soak.py"), "--tiny"], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["sessions"] == 20 and result["runs"] > 0 and result["integrity"] == "ok", result


def test_scale_tiny_measures_every_figure_without_an_error() -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "scale.py"), "--tiny"], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads(proc.stdout[proc.stdout.index("\n{") + 1:])
    assert report["mode"] == "tiny"
    failed = {k: f["error"] for k, f in report["results"].items() if "error" in f}
    assert not failed
    assert report["results"]["fork_memory_rows"]["median"] >= 0


def test_flat_tiny_measures_each_figure_beside_its_yardstick() -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "flat.py"), "--tiny"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads(proc.stdout[proc.stdout.index("\n{") + 1:])
    assert report["mode"] == "tiny"
    figures = report["results"]
    for name in ("fork", "show", "history"):
        assert figures[f"{name}_deep_20"]["runs"] and figures[f"{name}_deep_20_yardstick"]["runs"]
    assert {"memory_set_ratio", "ps_json_cpu", "ps_bare_cpu", "history_text_ratio", "send_jsonl_rate",
            "startup_ps_json"} <= set(figures)
    assert all(f["median"] > 0 for f in figures.values())


def _both_stores(script: str, keys: list[str]) -> None:
    """``script --tiny`` exits 0 (each stops on what must not happen), measuring ``keys`` on
    each store, every figure above 0."""
    proc = subprocess.run([sys.executable, str(BENCH / script), "--tiny"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])["results"]
    for store in ("sqlite", "postgresql"):
        assert {f"{store}_{k}" for k in keys} <= set(figures)
    assert all(f["median"] > 0 for f in figures.values())


def test_stores_tiny_measures_both_stores_and_claims_without_a_run_twice(postgres) -> None:
    _both_stores("stores.py", ["send", "history", "fork", "append", "ps", "claims_1", "claims_3"])  # once each


def test_search_tiny_measures_grep_the_index_and_its_cost_on_both_stores(postgres) -> None:
    _both_stores("search.py", [*(f"grep_{kind}_1000" for kind in ("unique", "rare", "phrase", "common")),
                               "index_1000", "append_cost"])  # a search that finds nothing stops it


def test_peer_tiny_compares_with_sqlitesession() -> None:
    import pytest

    sys.path.insert(0, str(BENCH))
    try:
        from peer import DEFAULT_VENV
    finally:
        sys.path.remove(str(BENCH))
    if not (DEFAULT_VENV / "bin" / "python").exists():
        pytest.skip(f"the peer is installed only for the benchmark: run bench/peer.py once to make {DEFAULT_VENV}")
    proc = subprocess.run([sys.executable, str(BENCH / "peer.py"), "--tiny"], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads(proc.stdout[proc.stdout.index("\n{") + 1:])
    assert report["peer"]["version"] and len(report["procession"]["append_s"]) == 1


def test_git_tiny_measures_commits_and_worktree_forks() -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "git.py"), "--tiny"], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])["results"]
    assert figures["commit_to_run"]["runs_started"] == 3  # one run per commit, none missed, none twice
    assert 0 < figures["commit_to_run"]["median"] < 5
    for key in ("fork_worktree_cli", "fork_worktree_api", "git_worktree_add", "merge_worktree_cli", "fork_copy_cli"):
        assert 0 < figures[key]["median"] < 60, key


def test_loop_tiny_measures_each_tool_kind_and_the_savings() -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "loop.py"), "--tiny"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])["results"]
    assert all(0 < figures[k]["median"] < 1 for k in figures if k.startswith("loop_"))
    assert figures["saving_mask-tools"]["after"] < figures["saving_mask-tools"]["before"] / 2


def test_transcripts_tiny_measures_every_format() -> None:
    from support.agent_clis import AgentCliMissing, find_cli, require_cli

    try:
        opencode: Path | None = find_cli("opencode").command
    except AgentCliMissing:
        opencode = None
    env = {**os.environ, **({"PROCESSION_OPENCODE": str(opencode)} if opencode else {})}
    proc = subprocess.run([sys.executable, str(BENCH / "transcripts.py"), "--tiny"], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["mode"] == "tiny"
    assert set(report["skipped"]) <= ({"opencode"} if opencode is None else set()), report["skipped"]
    measured = [cli for cli in ("claude", "codex", "opencode") if cli not in report["skipped"]]
    expected = {f"{cli}_{figure}" for cli in measured
                for figure in ("read_whole", "read_idle", "read_turn", "discover", "find", "read_all")}
    assert set(report["results"]) == expected | {"claude_read_reparse"}
    assert all(f["median"] > 0 for f in report["results"].values())
    if report["skipped"]:
        require_cli("opencode")  # skipped (or failed, where the CLIs are required): opencode was not measured


def test_adopt_tiny_adopts_every_transcript_and_follows_one() -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "adopt.py"), "--tiny"], capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["mode"] == "tiny"
    figures = report["results"]
    assert set(figures) == {f"adopt_{cli}{what}" for cli in ("claude", "codex") for what in ("", "_rate", "_messages")
                            } | {"sync_latency"}
    assert all(f["median"] > 0 for f in figures.values())
    assert len(figures["sync_latency"]["runs"]) == 3


def test_confine_tiny_measures_each_kind_of_start() -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "confine.py"), "--tiny"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])["results"]
    assert {"start_confined", "start_landlock", "start_unconfined", "start_overhead", "world_overhead",
            "start_ratio"} <= set(figures)
    assert all(len(figures[k]["runs"]) == 3 for k in ("start_confined", "start_landlock", "start_unconfined"))


def test_asking_tiny_measures_the_agent_clis_and_the_openai_loop() -> None:
    from support.agent_clis import require_cli

    for cli in ("claude", "codex", "opencode"):
        require_cli(cli)
    proc = subprocess.run([sys.executable, str(BENCH / "asking.py"), "--tiny"], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])["results"]
    for runner in ("claude", "codex", "opencode", "openai"):
        assert 0 < figures[f"{runner}_request_to_waiting"]["median"] < 60
        assert 0 < figures[f"{runner}_allow_to_tool"]["median"] < 60


def test_web_tiny_measures_the_page_the_push_and_the_tap() -> None:
    import shutil

    try:
        import playwright.async_api  # noqa: F401
        found = bool(shutil.which("chromium") or shutil.which("chromium-browser"))
    except ImportError:
        found = False
    if not found:  # as the browser tests (tests/web/test_web_browser.py) skip, or fail where required
        why = "the web bench needs Playwright (pip) and Chromium (Debian: apt-get install chromium)"
        if os.environ.get("PROCESSION_REQUIRE_BROWSER") == "1":
            pytest.fail(why)
        pytest.skip(why)
    proc = subprocess.run([sys.executable, str(BENCH / "web.py"), "--tiny", "--only", "openai"], capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])["results"]
    for key in ("first_paint", "first_state", "openai_request_to_push", "openai_request_to_page",
                "openai_allow_to_tool", "rss_1_page", "rss_10_pages"):
        assert figures[key]["median"] > 0, key


def test_idle_tiny_measures_an_engine_at_rest_and_with_idle_steps_and_no_thread_for_each() -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "idle.py"), "--tiny"], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["mode"] == "tiny" and report["steps"] == 10
    figures = report["results"]
    assert {"cpu_0", "cpu_10", "threads_0", "threads_10"} <= set(figures)
    assert figures["threads_10"]["median"] < figures["threads_0"]["median"] + 5  # not one per step
