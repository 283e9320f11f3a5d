#!/usr/bin/env python3
"""API summary: regenerate API.md from the public functions and classes under src/.

A Procession ``command:`` runner for a session woken by the commits that touch ``src/`` (a
commit trigger: ``procession trigger add SID commit --path 'src/**'``) or by any change under
it (a watch). It reads the session document on stdin (the run's cause names the commits
and the changed paths), parses every Python file under ``src/`` with ``ast`` (nothing is
imported or run), writes ``API.md`` in its working folder and answers with a one-line
summary of what changed.
"""

import ast
import json
import sys
from pathlib import Path


def first_line(node: ast.AsyncFunctionDef | ast.FunctionDef | ast.ClassDef | ast.Module) -> str:
    doc = ast.get_docstring(node) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def signature(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    args = [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]
    return f"{fn.name}({', '.join(args)})"


def main() -> int:
    doc = json.load(sys.stdin)
    root = Path.cwd() / "src"
    out, modules, items = ["# API", ""], 0, 0
    for path in sorted(root.rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        except SyntaxError as exc:
            out.append(f"## {path.relative_to(root)}\n\n(syntax error at line {exc.lineno}: not summarised)\n")
            continue
        modules += 1
        out.append(f"## {path.relative_to(root)}")
        if first_line(tree):
            out.append(f"\n{first_line(tree)}")
        out.append("")
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                out.append(f"- `{signature(node)}` — {first_line(node)}")
                items += 1
            elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                out.append(f"- class `{node.name}` — {first_line(node)}")
                items += 1
                for sub in node.body:
                    if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)) and not sub.name.startswith("_"):
                        out.append(f"  - `{signature(sub)}` — {first_line(sub)}")
                        items += 1
        out.append("")
    (Path.cwd() / "API.md").write_text("\n".join(out), encoding="utf-8")
    causes = doc["run"]["cause"]
    changed = sorted({Path(p).name for c in causes for p in c.get("paths", [])})
    commits = [c["subject"] for cause in causes for c in cause.get("commits", [])]
    why = f"after changes to {', '.join(changed)}" if changed else "on request"
    if commits:
        why = f"after {len(commits)} commit{'s' if len(commits) > 1 else ''} ({'; '.join(commits[-3:])})" + (
            f" changing {', '.join(changed)}" if changed else "")
    print(f"API.md regenerated {why}: {modules} modules, {items} public names.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
