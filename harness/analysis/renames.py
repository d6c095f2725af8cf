"""A test the PR only renamed keeps its history: its function's body, read with ``ast`` from the
checkout, is the body of a test the base ran under another name in the same file (read from the
base commit with ``git show``), one the PR no longer has."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path


def renamed_from(test_id: str, root: Path, base_commit: str, gone: list[str]) -> str | None:
    """The id in ``gone`` (tests of the same file the base ran and this run has not) whose body
    at ``base_commit`` is ``test_id``'s body here; None when there is none, or git or the
    sources cannot tell."""
    path, _, name = test_id.partition("::")
    if "::" in name or "[" in name:  # a method or a parametrized case: not compared
        return None
    try:
        here = _bodies((root / path).read_text(encoding="utf-8"))
        there = _bodies(
            subprocess.run(
                ["git", "show", f"{base_commit}:{path}"],
                cwd=root,
                capture_output=True,
                check=True,
                timeout=60,
            ).stdout.decode("utf-8")
        )
    except (OSError, UnicodeDecodeError, SyntaxError, subprocess.SubprocessError):
        return None
    body = here.get(name)
    return next((old for old in gone if body and there.get(old.partition("::")[2]) == body), None)


def _bodies(source: str) -> dict[str, str]:
    """Module-level function name -> its body (and arguments), as ``ast.dump`` writes them."""
    return {
        node.name: ast.dump(ast.Module([*node.body], [])) + ast.dump(node.args)
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
