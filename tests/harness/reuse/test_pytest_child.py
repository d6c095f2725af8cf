"""A test that starts a pytest child (``harness/reuse/pytest_child.py``): the files the child
runs are in the test's key, a change to one of them changes it, and a child whose arguments a
static reading cannot tell keeps the key conservative."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.files import write_tree

from stagebot.harness.reuse.dependency_key import (
    Environment,
    Repository,
    changed_inputs,
    dependency_key,
)
from stagebot.stages.catalog import load_catalog

TEST_ID = "tests/test_runs_suite.py::test_suite"
# The shape of harness/suites/nvfp4_moe/test_ops_api.py: a helper builds one command per
# argument list and starts them all; tests pass literal lists, one a computed option value.
HELPER_CHILD = """\
import subprocess
import sys
from pathlib import Path

SUITE = Path(__file__).parent.parent / "suite"


def _run_suites(tmp_path, *runs):
    suite = str(SUITE / "test_inner.py")
    plugins = ["-p", "pkg.plug", "-p", "no:cacheprovider"]
    commands = [[sys.executable, "-m", "pytest", suite, "-q", *plugins, *args] for args in runs]
    outputs = [tmp_path / f"run-{i}.out" for i in range(len(runs))]
    processes = []
    for command, out in zip(commands, outputs, strict=True):
        processes.append(subprocess.Popen(command, stdout=out.open("w")))
    return [process.wait() for process in processes]


def _run_suite(tmp_path, *args):
    return _run_suites(tmp_path, list(args))[0]


def test_suite(tmp_path):
    assert _run_suite(tmp_path, "-k", "inner", "--collect-only") == 0


def test_levels(tmp_path):
    from pkg.lib import LEVELS

    only = ["-k", "inner"]
    assert _run_suites(tmp_path, only, *([*only, "--level", name] for name in LEVELS[:2]))
"""
TREE = {
    "pytest.ini": "[pytest]\naddopts = -ra\n",
    "conftest.py": "",
    "pkg/__init__.py": "",
    "pkg/lib.py": 'LEVELS = ["low", "high"]\n',
    "pkg/plug.py": "def pytest_configure(config):\n    pass\n",
    "pkg/inner_only.py": "X = 1\n",
    "pkg/unrelated.py": "Y = 2\n",
    "suite/conftest.py": (
        "def pytest_addoption(parser):\n"
        '    parser.addoption("--level", default="low")\n'
        '    parser.addoption("--fast", action="store_true")\n'
    ),
    "suite/pytest.ini": "[pytest]\nmarkers = slow\n",
    "suite/test_inner.py": "from pkg.inner_only import X\n\ndef test_inner():\n    assert X\n",
    "suite/inputs.json": "[1]\n",
    "tests/conftest.py": "",
    "tests/test_runs_suite.py": HELPER_CHILD,
    "docs/notes.md": "notes\n",
}
ENVIRONMENT = Environment((("pytest", "8.3.3"),), "3.11.7", "Linux-x86_64", "CPU", "none")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return write_tree(tmp_path, TREE)


@pytest.fixture(scope="module")
def family():
    return next(f for f in load_catalog().families if f.name == "CPU-PyTorch")


def key(root: Path, family):
    return dependency_key(Repository(root), TEST_ID, family, ENVIRONMENT)


def write(root: Path, name: str, text: str) -> None:
    write_tree(root, {name: text})


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param("suite/test_inner.py", id="the test file the child runs"),
        pytest.param("pkg/inner_only.py", id="a module only the child's test imports"),
        pytest.param("suite/conftest.py", id="the conftest of the child's test"),
        pytest.param("suite/pytest.ini", id="a pytest configuration beside the child's test"),
        pytest.param("pkg/plug.py", id="the plug-in the child loads with -p"),
        pytest.param("pkg/lib.py", id="the module a computed option value comes from"),
    ],
)
def test_a_change_to_a_file_the_pytest_child_runs_changes_the_key(repo, family, changed) -> None:
    before = key(repo, family)
    assert not before.conservative, before.conservative
    (repo / changed).write_text((repo / changed).read_text() + "# changed\n")
    after = key(repo, family)
    assert changed_inputs(before, after) == [f"files changed: {changed}"]


@pytest.mark.parametrize("changed", ["docs/notes.md", "pkg/unrelated.py"])
def test_a_file_the_child_does_not_run_leaves_the_key_equal(repo, family, changed) -> None:
    before = key(repo, family)
    (repo / changed).write_text("# changed\n")
    assert key(repo, family).digest == before.digest


def test_an_option_given_a_computed_value_needs_its_declaration_in_the_key(repo, family) -> None:
    assert not key(repo, family).conservative
    write(repo, "suite/conftest.py", "def pytest_addoption(parser):\n    pass\n")
    why = key(repo, family).conservative
    assert why == (
        "tests/test_runs_suite.py: line 15: pytest --level given a computed value, "
        "an option no module of the key declares",
    )


# Each starts a pytest child whose arguments no static reading tells: (code, why).
CONSERVATIVE = [
    pytest.param(
        '[sys.executable, "-m", "pytest", pick()]',
        "pytest given a computed test path",
        id="a computed test path",
    ),
    pytest.param(
        '[sys.executable, "-m", "pytest", "-q", pick()]',
        "pytest -q given a computed value, an option no module of the key declares",
        id="a computed argument after a flag",
    ),
    pytest.param(
        '["pytest", "suite/test_inner.py", "-p", pick()]',
        "pytest -p of a computed plug-in",
        id="a computed plug-in",
    ),
    pytest.param(
        '["pytest", "suite/test_inner.py", *pick()]',
        "pytest given a computed number of arguments",
        id="computed arguments",
    ),
    pytest.param(
        '["pytest", f"suite/{pick()}.py"]',
        "pytest given a computed test path",
        id="an f-string test path",
    ),
    pytest.param(
        '["pytest", "-c", "other.ini", "suite/test_inner.py"]',
        "pytest -c changes what it loads",
        id="another configuration file",
    ),
    pytest.param(
        '["pytest", "suite/test_inner.py", "-cother.ini"]',
        "pytest -c changes what it loads",
        id="another configuration file, its value attached",
    ),
    pytest.param(
        '["pytest", "-oaddopts=-p plug", "suite/test_inner.py"]',
        "pytest -o changes what it loads",
        id="an ini override, its value attached",
    ),
    pytest.param(
        '["pytest", "--rootdir=elsewhere", "suite/test_inner.py"]',
        "pytest --rootdir changes what it loads",
        id="another root",
    ),
    pytest.param(
        '[sys.executable, "-m", "pytest", "-q"]',
        "pytest runs its configured test paths (none named)",
        id="no test path",
    ),
    pytest.param(
        '["pytest", "/elsewhere/test_x.py"]',
        "pytest given /elsewhere/test_x.py, outside the repository",
        id="a path outside the repository",
    ),
    pytest.param(
        '["pytest" if pick() else "tool", "suite/test_inner.py"]',
        "starts pytest or another program, a computed choice",
        id="pytest or another program",
    ),
]


@pytest.mark.parametrize(("command", "why"), CONSERVATIVE)
def test_a_pytest_child_it_cannot_tell_keeps_the_key_conservative(
    repo, family, command, why
) -> None:
    write(
        repo,
        "tests/test_runs_suite.py",
        "import subprocess\nimport sys\n\nfrom pkg.lib import pick\n\n"
        f"def test_suite():\n    subprocess.run({command})\n",
    )
    conservative = key(repo, family).conservative
    assert f"tests/test_runs_suite.py: line 7: {why}" in conservative, conservative


def test_a_child_started_in_another_folder_keeps_the_key_conservative(repo, family) -> None:
    write(
        repo,
        "tests/test_runs_suite.py",
        "import subprocess\n\ndef test_suite(tmp_path):\n"
        '    subprocess.run(["pytest", "suite/test_inner.py"], cwd=tmp_path)\n',
    )
    assert key(repo, family).conservative == (
        "tests/test_runs_suite.py: line 4: starts pytest in another folder (cwd)",
    )


def test_a_child_given_arguments_by_its_environment_keeps_the_key_conservative(repo, family):
    write(
        repo,
        "tests/test_runs_suite.py",
        "import os, subprocess\n\ndef test_suite():\n"
        '    env = {**os.environ, "PYTEST_ADDOPTS": "-p pkg.other"}\n'
        '    subprocess.run(["pytest", "suite/test_inner.py"], env=env)\n',
    )
    assert key(repo, family).conservative == (
        "tests/test_runs_suite.py: line 5: may give pytest arguments by its environment "
        "(PYTEST_ADDOPTS)",
    )


def test_a_helper_passed_on_as_a_value_keeps_the_key_conservative(repo, family) -> None:
    """Its calls cannot all be seen, so neither can the arguments it is given."""
    write(
        repo,
        "tests/test_runs_suite.py",
        HELPER_CHILD + "\nRUNNERS = [_run_suite]\n",
    )
    assert key(repo, family).conservative == (
        "tests/test_runs_suite.py: line 15: pytest given a computed number of arguments",
    )


# The same child reached by module, by bare name, by alias, by an alias's attribute, by an
# assigned name: each is followed the same way.
CALLERS = [
    pytest.param("import subprocess\n", "subprocess.run", id="by module"),
    pytest.param("from subprocess import run\n", "run", id="by bare name"),
    pytest.param("from subprocess import Popen as start\n", "start", id="by an alias"),
    pytest.param("import subprocess as sp\n", "sp.check_call", id="by an alias's attribute"),
    pytest.param("import subprocess\nrunner = subprocess.call\n", "runner", id="assigned"),
]


@pytest.mark.parametrize(("imports", "call"), CALLERS)
def test_a_pytest_child_is_followed_however_the_call_is_reached(
    repo, family, imports, call
) -> None:
    write(
        repo,
        "tests/test_runs_suite.py",
        f"{imports}import sys\n\ndef test_suite():\n"
        f'    {call}([sys.executable, "-m", "pytest", "suite", "-p", "pkg.plug", "-k", "x"])\n',
    )
    before = key(repo, family)
    assert not before.conservative, before.conservative
    assert {"suite/test_inner.py", "suite/inputs.json", "pkg/plug.py"} <= set(before.files)
    write(repo, "suite/test_new.py", "def test_new():\n    pass\n")
    after = key(repo, family)
    assert changed_inputs(before, after) == ["files changed: suite/test_new.py"]


def test_a_pytest_child_given_to_a_launcher_is_followed(repo, family) -> None:
    """A function that starts the command its caller passes (a launcher, import_graph): the
    caller's pytest command is read as if it started it."""
    write(
        repo,
        "pkg/launch.py",
        "import subprocess\n\ndef run_process(argv):\n    return subprocess.run(argv)\n",
    )
    write(
        repo,
        "tests/test_runs_suite.py",
        "import sys\n\nfrom pkg.launch import run_process\n\ndef test_suite():\n"
        '    run_process([sys.executable, "-m", "pytest", "suite/test_inner.py"])\n',
    )
    before = key(repo, family)
    assert not before.conservative, before.conservative
    write(repo, "suite/conftest.py", "# changed\n")
    assert changed_inputs(before, key(repo, family)) == ["files changed: suite/conftest.py"]
    write(
        repo,
        "tests/test_runs_suite.py",
        "import sys\n\nfrom pkg.launch import run_process\n\ndef test_suite():\n"
        '    run_process([sys.executable, "-m", "pytest", pick()])\n',
    )
    assert key(repo, family).conservative == (
        "tests/test_runs_suite.py: line 6: pytest given a computed test path",
    )
