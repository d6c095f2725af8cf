"""Suspects of a NEW failure: traceback frames first, then the test's import closure (read with
ast, src layout and relative imports included), then proximity; at most three."""

from __future__ import annotations

from pathlib import Path

from helpers.files import write_tree

from stagebot.harness.analysis.suspects import import_closure, rank_suspects


def repo(tmp_path: Path) -> Path:
    files = {
        "src/pkg/__init__.py": "",
        "src/pkg/a.py": "from . import b\nfrom .sub.c import f\n",
        "src/pkg/b.py": "import json\n",
        "src/pkg/sub/__init__.py": "",
        "src/pkg/sub/c.py": "def f():\n    return 1\n",
        "src/pkg/unused.py": "",
        "tests/check_a.py": "def test_x():\n    from pkg.a import b\n",
        "tests/check_b.py": "import pkg.unused\n",
        "tests/helpers.py": "",
        "docs/notes.md": "",
    }
    return write_tree(tmp_path, files)


def test_the_import_closure_follows_the_repositorys_own_modules(tmp_path) -> None:
    root = repo(tmp_path)
    closure = import_closure(str(root), "tests/check_a.py")
    assert {"src/pkg/a.py", "src/pkg/b.py", "src/pkg/sub/c.py", "src/pkg/__init__.py"} <= closure
    assert "src/pkg/unused.py" not in closure and "tests/helpers.py" not in closure


def test_suspects_are_ranked_by_evidence(tmp_path) -> None:
    root = repo(tmp_path)
    changed = ["tests/helpers.py", "docs/notes.md", "src/pkg/b.py", "src/pkg/sub/c.py"]
    log = f'  File "{root}/src/pkg/sub/c.py", line 2, in f\nE   ZeroDivisionError'
    found = rank_suspects("tests/check_a.py::test_x", log, changed, root=root)
    assert [(s.path, s.reason) for s in found] == [
        ("src/pkg/sub/c.py", "in traceback"),
        ("src/pkg/b.py", "imported by the test"),
    ]  # tests/helpers.py only lies in the test's folder: no evidence, no suspect
    assert rank_suspects("tests/check_b.py::test_y", None, changed, root=root) == ()
    assert rank_suspects("tests/check_a.py::test_x", log, [], root=root) == ()
