"""No test module imports another test module (or a conftest): what tests share lives in
tests/helpers/ or is a fixture. A test module imported by another runs its module-level code
twice under two names, ties the two files' order and state together, and hides where a helper
lives."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TREES = (ROOT / "tests", ROOT / "harness" / "suites")


def is_test_module(name: str) -> bool:
    """Whether dotted module ``name`` is a test module or a conftest (pytest's file names)."""
    last = name.rsplit(".", 1)[-1]
    return last.startswith("test_") or last.endswith("_test") or last == "conftest"


def is_package(name: str) -> bool:
    """Whether dotted ``name`` is a package of this repository (stagebot.X is the folder X;
    a bare name, a folder of tests/)."""
    parts = name.split(".")
    folder = ROOT.joinpath(*parts[1:]) if parts[0] == "stagebot" else ROOT.joinpath("tests", *parts)
    return (folder / "__init__.py").exists()


def imported_modules(source: str) -> list[tuple[int, str]]:
    """(line, module) of every import in ``source``, nested ones included (the names a
    ``from package import …`` takes, too), and of every ``importlib.import_module("…")`` /
    ``__import__("…")`` of a constant name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            if is_package(node.module):  # `from package import test_x`: a module
                found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):  # relative: from . import test_x
            found += [(node.lineno, alias.name) for alias in node.names]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None))
            in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return found


def test_imports(root: Path) -> list[str]:
    """``path:line imports module`` for each test module imported under ``root``."""
    return [
        f"{path.relative_to(root)}:{line} imports {module}"
        for path in sorted(root.rglob("*.py"))
        if "fixtures" not in path.relative_to(root).parts  # the tests' own user repositories
        for line, module in imported_modules(path.read_text())
        if is_test_module(module)
    ]


test_imports.__test__ = False  # a helper named like a test: pytest must not collect it


@pytest.mark.parametrize("tree", TREES, ids=lambda tree: str(tree.relative_to(ROOT)))
def test_no_test_module_imports_another(tree: Path) -> None:
    assert test_imports(tree) == [], "move what they share to tests/helpers/ or a fixture"


@pytest.mark.parametrize(
    "planted",
    [
        "from test_handle_event import PR\n",
        "import test_trust_flow\n",
        "def f():\n    from test_artifact_zip import corrupt\n",
        "from stagebot.harness.suites.nvfp4_moe import test_layouts\n",
        "from stagebot.harness.suites.nvfp4_moe.test_grouped_gemms import MATRIX\n",
        "from . import conftest\n",
        "import importlib\nimportlib.import_module('test_cli')\n",
    ],
)
def test_a_planted_import_of_a_test_module_is_found(tmp_path: Path, planted: str) -> None:
    (tmp_path / "test_planted.py").write_text(planted)
    (tmp_path / "helpers").mkdir()
    fine = "from helpers.cli import bot\nimport testing\n"
    fine += (
        "from stagebot.harness.analysis.evidence import test_evidence\n"  # a function, not a module
    )
    (tmp_path / "helpers" / "fine.py").write_text(fine)
    (found,) = test_imports(tmp_path)
    assert found.startswith("test_planted.py:")
