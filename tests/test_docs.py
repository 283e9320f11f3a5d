"""The manual builds, strict and offline, and its CLI reference holds every command's ``--help``.

``mkdocs build --strict`` fails on a broken link between pages, a missing page or anchor, and
a reference page that lost the line the generator replaces (``docs/gen_cli.py``). The build
runs with every proxy variable pointing at a closed port on this machine, so a plugin that
tried to fetch something would fail it. The README's own links must name files that exist:
it is read on Git hosts, where a relative link to ``docs/*.md`` is the manual.
"""

from __future__ import annotations

import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
#: A closed port: whatever would fetch through a proxy is refused at once.
NOWHERE = "http://127.0.0.1:9"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_cli", ROOT / "docs" / "gen_cli.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _text(page: Path) -> str:
    """A built page as a reader sees its text: tags dropped, entities read."""
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))


def test_the_site_builds_strict_offline_with_every_commands_help(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    env.update({name: NOWHERE for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                                           "all_proxy", "ALL_PROXY")})
    for name in ("no_proxy", "NO_PROXY"):
        env.pop(name, None)
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                            str(ROOT / "mkdocs.yml"), "--site-dir", str(site)],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-4000:]

    gen = _generator()
    reference = _text(site / "reference" / "cli" / "index.html")
    found = list(gen.commands())
    names = {name for name, _ in found if " " not in name}
    assert {"spawn", "fork", "merge", "trigger", "memory", "mcp", "migrate-store"} <= names
    for name, parser in found:
        assert gen.help_text(parser) in reference, f"procession {name} --help is not in the CLI reference"
    assert gen.help_text(gen.parser()) in reference
    assert gen.MARKER not in reference


def test_the_readme_links_to_files_that_exist() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [t for t in targets if "://" not in t]
    assert any(t.startswith("docs/") for t in local)
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"the README links to files that are not there: {missing}"
