"""Planted regressions: each input of a test's dependency key, changed alone on a small repository,
changes the key (so the test re-runs); a change to what the test cannot depend on leaves it equal
(so the key is not simply new every time); and what no static reading can follow makes the key
the whole repository's."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from helpers.files import write_tree

from stagebot.harness.reuse.dependency_key import (
    Environment,
    Observation,
    Repository,
    changed_inputs,
    dependency_key,
)
from stagebot.harness.reuse.import_graph import import_closure, module_facts
from stagebot.stages.catalog import SuiteRef, Waive, load_catalog

TEST_ID = "tests/test_core.py::test_f[small]"
TREE = {
    "pyproject.toml": (
        '[project]\nname = "pkg"\n[project.entry-points.pytest11]\nours = "pkg.plugin"\n'
        '[tool.pytest.ini_options]\naddopts = "-ra"\n'
    ),
    "conftest.py": "",
    "pkg/__init__.py": "",
    "pkg/plugin.py": "def pytest_addoption(parser):\n    pass\n",
    "pkg/core.py": (
        "import os\nfrom pathlib import Path\n\nfrom pkg import deep\n\n"
        'LIMITS = "data/limits.yaml"\n\n'
        "def f():\n"
        '    table = (Path(__file__).parent / "table.json").read_text()\n'
        '    return deep.g(), table, os.environ.get("PKG_MODE"), Path(LIMITS).read_text()\n'
        "\ndef workflow():\n"
        '    return Path(".github/workflows/ci.yml").read_text()\n'
    ),
    "pkg/deep.py": (
        "from pkg.plain import calc\nfrom pkg.res import reader\n\ndef g():\n    return 1\n"
    ),
    "pkg/res/reader.py": (
        "from pathlib import Path\n\ndef read(name):\n"
        "    return (Path(__file__).parent / name).read_text()\n"
    ),
    "pkg/res/schema.txt": "v1\n",
    "pkg/plain/calc.py": "def add(a, b):\n    return a + b\n",
    "pkg/plain/NOTES.md": "notes on calc\n",
    "pkg/table.json": "[1, 2]\n",
    "pkg/unrelated.py": "X = 1\n",
    "pkg/launch.py": (
        "import subprocess\n\n"
        "def run_process(argv):\n    return subprocess.run(argv, check=False)\n\n"
        'def driver():\n    return run_process(["nvidia-smi"])\n'
    ),
    "data/limits.yaml": "max: 3\n",
    "data/other.yaml": "unused: true\n",
    "docs/notes.md": "notes\n",
    ".github/workflows/ci.yml": "on: push\n",
    ".pytest_cache/v/cache/lastfailed": "{}\n",
    "tests/conftest.py": "import pytest\n",
    "tests/test_core.py": "from pkg.core import f\n\ndef test_f():\n    f()\n",
    "tests/test_other.py": "import pkg.unrelated\n",
}
ENVIRONMENT = Environment(
    distributions=(("numpy", "2.1.0"), ("torch", "2.13.0")),
    python="3.11.7",
    platform="Linux-x86_64",
    gpu_type="H200",
    gpu_driver="570.86.15",
    variables={"PKG_MODE": "fast", "HOME": "/root"},
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return write_tree(tmp_path, TREE)


@pytest.fixture(scope="module")
def family():
    catalog = load_catalog()
    return next(f for f in catalog.families if f.name == "CPU-PyTorch")


def key(
    root: Path,
    family,
    environment: Environment = ENVIRONMENT,
    waives=(),
    test_id=TEST_ID,
    observed=None,
):
    return dependency_key(Repository(root), test_id, family, environment, waives, observed)


def edit(root: Path, name: str, text: str = "# changed\n") -> None:
    path = root / name
    path.write_text(path.read_text() + text)


FILE_CHANGES = [
    pytest.param("pkg/core.py", id="a module the test imports"),
    pytest.param("pkg/deep.py", id="a module imported through another"),
    pytest.param("pkg/table.json", id="a data file beside an imported module"),
    pytest.param("data/limits.yaml", id="a data file a module names by a literal"),
    pytest.param("pkg/res/schema.txt", id="a file beside a module that opens files beside it"),
    pytest.param(".github/workflows/ci.yml", id="a file in a dot folder a literal names"),
    pytest.param("tests/conftest.py", id="the test folder's conftest"),
    pytest.param("conftest.py", id="the root conftest"),
    pytest.param("pkg/plugin.py", id="the repository's own pytest plugin"),
    pytest.param("pyproject.toml", id="the pytest configuration"),
    pytest.param("tests/test_core.py", id="the test file itself"),
]


@pytest.mark.parametrize("changed", FILE_CHANGES)
def test_a_change_to_a_file_the_test_depends_on_changes_its_key(repo, family, changed) -> None:
    before = key(repo, family)
    assert not before.conservative, before.conservative
    edit(repo, changed)
    after = key(repo, family)
    assert after.digest != before.digest
    assert changed_inputs(before, after) == [f"files changed: {changed}"]


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param("docs/notes.md", id="docs"),
        pytest.param("pkg/unrelated.py", id="a module only another test imports"),
        pytest.param("data/other.yaml", id="a data file no imported module names"),
        pytest.param("pkg/plain/NOTES.md", id="a file beside a module that never locates itself"),
        pytest.param("tests/test_other.py", id="another test file"),
    ],
)
def test_a_change_the_test_cannot_depend_on_keeps_its_key(repo, family, changed) -> None:
    before = key(repo, family)
    edit(repo, changed)
    assert key(repo, family).digest == before.digest


def test_a_new_import_brings_the_imported_module_in(repo, family) -> None:
    edit(repo, "pkg/deep.py", "import pkg.unrelated\n")
    before = key(repo, family)
    edit(repo, "pkg/unrelated.py")
    assert key(repo, family).digest != before.digest


ENVIRONMENT_CHANGES = [
    pytest.param(
        {"distributions": (("numpy", "2.1.0"), ("torch", "2.13.1"))},
        "environment",
        id="an installed distribution's version",
    ),
    pytest.param(
        {"distributions": (("numpy", "2.1.0"), ("scipy", "1.14"), ("torch", "2.13.0"))},
        "environment",
        id="a new distribution",
    ),
    pytest.param({"python": "3.12.1"}, "environment", id="the Python version"),
    pytest.param(
        {"variables": {"PKG_MODE": "slow", "HOME": "/root"}},
        "environment",
        id="a variable the code reads by name",
    ),
    pytest.param({"variables": {"HOME": "/root"}}, "environment", id="that variable unset"),
    pytest.param({"gpu_type": "H100"}, "gpu", id="the GPU type"),
    pytest.param({"gpu_driver": "575.51.03"}, "gpu", id="the GPU driver"),
]


@pytest.mark.parametrize(("change", "part"), ENVIRONMENT_CHANGES)
def test_a_change_of_environment_changes_the_key(repo, family, change, part) -> None:
    before = key(repo, family)
    after = key(repo, family, dataclasses.replace(ENVIRONMENT, **change))
    assert after.digest != before.digest
    assert changed_inputs(before, after) == [f"{part} changed"]


def test_a_variable_no_module_reads_is_not_in_the_key(repo, family) -> None:
    other = dataclasses.replace(ENVIRONMENT, variables={"PKG_MODE": "fast", "HOME": "/home/x"})
    assert key(repo, family, other).digest == key(repo, family).digest


CATALOG_CHANGES = [
    pytest.param(
        {"suites": (SuiteRef("tests", args=("--mode", "full")),)}, "suite_args", id="suite args"
    ),
    pytest.param({"suites": (SuiteRef("tests", marks="not slow"),)}, "suite_args", id="suite -m"),
    pytest.param({"timeout_minutes": 5}, "catalog", id="the family's timeout"),
    pytest.param({"max_reruns": 0}, "catalog", id="the family's reruns"),
]


@pytest.mark.parametrize(("change", "part"), CATALOG_CHANGES)
def test_a_change_of_the_catalog_entry_changes_the_key(repo, family, change, part) -> None:
    before = key(repo, family)
    after = key(repo, dataclasses.replace(family, **change))
    assert after.digest != before.digest
    assert changed_inputs(before, after) == [f"{part} changed"]


def test_where_the_entry_is_written_is_not_part_of_it(repo, family) -> None:
    moved = dataclasses.replace(family, source="stages/catalog/stages.yaml:99")
    assert key(repo, moved).digest == key(repo, family).digest


def test_a_waive_naming_the_test_changes_the_key_and_one_naming_another_does_not(
    repo, family
) -> None:
    before = key(repo, family)
    other = Waive("tests/test_other.py", "flaky on CPU", None, "waives.txt:1")
    assert key(repo, family, waives=[other]).digest == before.digest
    mine = Waive("tests/test_core.py::test_f", "flaky on CPU", None, "waives.txt:2")
    after = key(repo, family, waives=[mine])
    assert changed_inputs(before, after) == ["catalog changed"]


def test_the_test_id_and_family_are_in_the_key(repo, family) -> None:
    before = key(repo, family)
    assert key(repo, family, test_id="tests/test_core.py::test_f[big]").digest != before.digest
    renamed = dataclasses.replace(family, name="CPU-Other")
    assert changed_inputs(before, key(repo, renamed)) == ["test changed"]


# A function importing the module of the path its callers name (stagebot's own pytest plugin
# adopts its conftests this way); the cases below give it no conftest.
IMPORTER = (
    "import importlib\nfrom pathlib import Path\n\nROOT = Path()\n\n"
    "def adopt(conftest):\n"
    "    name = canonical_name(conftest)\n    return importlib.import_module(name)\n"
)

BLIND = [
    pytest.param(
        "import importlib\n\ndef load(name):\n    return importlib.import_module(name)\n",
        "import_module() of a computed name",
        id="an import of a computed name",
    ),
    pytest.param(
        "def load(name):\n    return __import__(name)\n",
        "__import__() of a computed name",
        id="__import__ of a computed name",
    ),
    pytest.param(
        "import subprocess, sys\n\ndef run(script):\n"
        "    subprocess.run([sys.executable, script])\n",
        "subprocess.run() may run repository code",
        id="a subprocess running a Python file named at run time",
    ),
    pytest.param(
        "from pkg.launch import run_process\n\n"
        'def run(script):\n    run_process(["python", script])\n',
        "run_process() may run repository code",
        id="a launcher given a Python command",
    ),
    pytest.param(
        "import shutil, subprocess, sys\n\ndef run(fast):\n"
        '    tool = shutil.which("nvidia-smi")\n    if fast:\n        tool = sys.executable\n'
        "    subprocess.run([tool])\n",
        "subprocess.run() may run repository code",
        id="a program name rebound to Python",
    ),
    pytest.param(
        "import importlib\n\ndef load(name):\n"
        '    return importlib.import_module(f"{__name__}.{name}")\n',
        "import_module() of a computed name",
        id="a submodule of a module that is not a package",
    ),
    pytest.param(
        "import os\n\ndef mode(name):\n    return os.environ[name]\n",
        "an environment variable read by a computed name",
        id="an environment variable read by a computed name",
    ),
    pytest.param(
        IMPORTER + "\ndef use(path):\n    return adopt(path)\n",
        "adopt() imports a module by a computed name",
        id="an importer of a path given a path that is no conftest",
    ),
    pytest.param(
        IMPORTER + '\nHANDLERS = [adopt]\nadopt(ROOT / "conftest.py")\n',
        "import_module() of a computed name",
        id="an importer of a path passed on as a value",
    ),
    pytest.param(
        "import importlib\n\ndef pytest_collect_file(file_path, parent):\n"
        "    return importlib.import_module(str(file_path))\n",
        "import_module() of a computed name",
        id="a hook importing the path pytest gives it",
    ),
    pytest.param(
        "import importlib\n\nclass Thing:\n    def load(self):\n"
        "        return importlib.import_module(str(self.path))\n",
        "import_module() of a computed name",
        id="self.path of a class that is no pytest collector",
    ),
    pytest.param(
        "import importlib, pytest\n\nclass Own(pytest.Module):\n    def _getobj(self):\n"
        '        return importlib.import_module(pick(self.path, "pkg"))\n',
        "import_module() of a computed name",
        id="a name computed from the collected path and something else",
    ),
    pytest.param(
        "import subprocess, sys\n\ndef run():\n"
        '    subprocess.run([sys.executable, "-m", "pytest"])\n',
        "pytest runs its configured test paths (none named)",
        id="a pytest child",
    ),
    pytest.param(
        "import subprocess, sys\n\ndef run():\n"
        '    subprocess.run([sys.executable, "-m", "tool", "-q", "tests/check.py"])\n',
        "python -m tool runs repository files it is given",
        id="a python -m child given a Python file",
    ),
    pytest.param(
        "import subprocess, sys\n\ndef run():\n"
        '    subprocess.run([sys.executable, "-c", "def ("])\n',
        "python -c of code that does not parse",
        id="a python -c child whose code does not parse",
    ),
    pytest.param(
        "import subprocess, sys\n\ndef run():\n"
        '    subprocess.run([sys.executable, "-m", "tool", "tests/check.py"])\n',
        "python -m tool runs repository files it is given",
        id="a python -m child given a Python file first",
    ),
    pytest.param("X = 1\x00\n", "unparsable: ", id="a module holding a NUL byte"),
    pytest.param(
        'import subprocess, sys\n\ndef run():\n    subprocess.run([sys.executable, "-c"])\n',
        "subprocess.run() may run repository code",
        id="python -c without its code",
    ),
    pytest.param(
        "import importlib, pytest\n\nclass Own(pytest.Module):\n    def _getobj(self):\n"
        "        return importlib.import_module(a(b(c(d(e(self.path))))))\n",
        "import_module() of a computed name",
        id="a name computed from the collected path through five calls",
    ),
]


def test_a_module_that_cannot_be_read_makes_the_key_the_whole_repositorys(repo, family) -> None:
    (repo / "pkg/gone.py").symlink_to(repo / "nowhere.py")  # a dangling link
    edit(repo, "pkg/deep.py", "import pkg.gone\n")
    assert "pkg/gone.py: unreadable: FileNotFoundError" in key(repo, family).conservative


def test_a_name_resolved_with_its_attribute_brings_its_module_in(repo, family) -> None:
    (repo / "pkg/hooks.py").write_text(
        'import pkgutil\n\nX = pkgutil.resolve_name("pkg.unrelated:X")\n'
    )
    edit(repo, "pkg/deep.py", "import pkg.hooks\n")
    before = key(repo, family)
    assert before.conservative == ()
    edit(repo, "pkg/unrelated.py")
    assert changed_inputs(before, key(repo, family)) == ["files changed: pkg/unrelated.py"]


@pytest.mark.parametrize(("source", "reason"), BLIND)
def test_what_cannot_be_followed_makes_the_key_the_whole_repositorys(
    repo, family, source, reason
) -> None:
    (repo / "pkg/blind.py").write_text(source)
    edit(repo, "pkg/deep.py", "import pkg.blind\n")
    before = key(repo, family)
    assert any(reason in why for why in before.conservative), before.conservative
    assert set(before.files) == set(TREE) - {".pytest_cache/v/cache/lastfailed"} | {
        "pkg/blind.py"
    }  # every file of the repository, its caches left out
    for changed in ("docs/notes.md", ".github/workflows/ci.yml"):  # no static reading ties them
        edit(repo, changed)
        after = key(repo, family)
        assert changed_inputs(before, after) == [f"files changed: {changed}"]
        before = after
    edit(repo, ".pytest_cache/v/cache/lastfailed")  # a cache is no input, even then
    assert key(repo, family).digest == before.digest


def test_imports_of_the_files_pytest_collects_keep_the_key_precise(repo, family) -> None:
    """A pytest plugin importing, by a name computed from the path, the file a pytest collector
    collects (``self.path``) or a conftest its callers name (``folder / "conftest.py"``)
    imports what pytest itself would: the key stays precise. Another module calling the same
    importer with any other path makes it conservative."""
    (repo / "pkg/adopter.py").write_text(
        "import importlib\nimport pytest\n\n"
        "def pytest_collect_directory(path, parent):\n"
        '    _adopt(parent.config.pluginmanager, path / "conftest.py")\n\n'
        "def _adopt(manager, conftest):\n"
        "    name = canonical_name(conftest)\n"
        "    manager.register(importlib.import_module(name))\n\n"
        "class OwnModule(pytest.Module):\n"
        "    def _getobj(self):\n"
        "        return importlib.import_module(canonical_name(self.path))\n"
    )
    edit(repo, "pkg/deep.py", "import pkg.adopter\n")
    before = key(repo, family)
    assert before.conservative == ()
    edit(repo, "docs/notes.md")
    assert key(repo, family).digest == before.digest
    (repo / "pkg/caller.py").write_text("from pkg.adopter import _adopt\n\n_adopt(None, 'x.py')\n")
    edit(repo, "pkg/deep.py", "import pkg.caller\n")
    assert "pkg/caller.py: line 3: _adopt() imports a module by a computed name" in (
        key(repo, family).conservative
    )


def test_what_can_be_followed_keeps_the_key_precise(repo, family) -> None:
    """Literal imports, tables of literal module names, launchers given an outside program,
    environment variables named by a constant, and ``python -c CODE`` / ``python -m MODULE`` with
    literal CODE / MODULE (read as part of the module) are followed, not made conservative."""
    (repo / "pkg/seen.py").write_text(
        "import importlib, os, shutil, subprocess\n\n"
        'MODULES = ("pkg.unrelated",)\nMODE = "PKG_MODE"\n\n'
        "def load():\n"
        "    for module in MODULES:\n        importlib.import_module(module)\n"
        '    importlib.import_module("pkg.launch")\n'
        '    smi = shutil.which("nvidia-smi")\n    subprocess.run([smi, "-L"])\n'
        "    return os.environ.get(MODE)\n"
    )
    edit(repo, "pkg/deep.py", "import pkg.seen\n")
    before = key(repo, family)
    assert before.conservative == ()
    assert {"pkg/unrelated.py", "pkg/launch.py"} <= set(before.files)
    assert module_facts(str(repo), "pkg/seen.py").environment == ("PKG_MODE",)
    edit(repo, "docs/notes.md")
    assert key(repo, family).digest == before.digest


@pytest.mark.parametrize(
    "command",
    [
        pytest.param('[sys.executable, "-c", CODE]', id="python -c, a constant"),
        pytest.param('[sys.executable, "-m", "pkg.child"]', id="python -m, a literal"),
    ],
)
def test_a_python_child_with_literal_code_brings_its_imports_in(repo, family, command) -> None:
    (repo / "pkg/child.py").write_text("import pkg.unrelated\n")
    (repo / "pkg/spawner.py").write_text(
        'import subprocess, sys\n\nCODE = "import pkg.child"\n\n'
        f"def run():\n    subprocess.run({command}, check=True)\n"
    )
    edit(repo, "pkg/deep.py", "import pkg.spawner\n")
    before = key(repo, family)
    assert before.conservative == ()
    edit(repo, "pkg/unrelated.py")  # imported only by the child's code, through pkg.child
    assert changed_inputs(before, key(repo, family)) == ["files changed: pkg/unrelated.py"]


def test_a_packages_plug_ins_found_by_name_are_all_in_the_key(repo, family) -> None:
    """A package's ``__init__`` importing its own modules by ``f"{__name__}.{name}"`` (plug-ins
    found with ``pkgutil.iter_modules(__path__)``) brings every module under its folder in:
    precise, not conservative, and a change to any plug-in re-runs the test."""
    (repo / "pkg/plugins").mkdir()
    (repo / "pkg/plugins/__init__.py").write_text(
        "import importlib, pkgutil\n\n"
        "for found in pkgutil.iter_modules(__path__):\n"
        '    importlib.import_module(f"{__name__}.{found.name}")\n'
    )
    (repo / "pkg/plugins/first.py").write_text("A = 1\n")
    (repo / "pkg/plugins/second.py").write_text("B = 2\n")
    edit(repo, "pkg/deep.py", "import pkg.plugins\n")
    before = key(repo, family)
    assert before.conservative == ()
    assert {"pkg/plugins/first.py", "pkg/plugins/second.py"} <= set(before.files)
    edit(repo, "pkg/plugins/second.py")
    assert changed_inputs(before, key(repo, family)) == ["files changed: pkg/plugins/second.py"]


def test_a_name_bound_to_something_else_anywhere_is_not_a_literal(repo, family) -> None:
    (repo / "pkg/mixed.py").write_text(
        'import importlib\n\nNAME = "pkg.unrelated"\n\n'
        "def load(other):\n    NAME = other\n    return importlib.import_module(NAME)\n"
    )
    edit(repo, "pkg/deep.py", "import pkg.mixed\n")
    assert any(
        "import_module() of a computed name" in why for why in key(repo, family).conservative
    )


@pytest.mark.parametrize("folder", ["dist", "build", "out", "venv"])
def test_a_test_folder_named_like_an_output_is_read_as_code(repo, family, folder) -> None:
    """Only the root's dist/, build/, out/ and venv/ are outputs: tests/dist/test_x.py is a test
    whose key must follow the module it imports (the failure corpus's tests/dist)."""
    test_file = f"tests/{folder}/test_core.py"
    (repo / test_file).parent.mkdir()
    (repo / test_file).write_text((repo / "tests/test_core.py").read_text())
    before = key(repo, family, test_id=f"{test_file}::test_f")
    assert not before.conservative, before.conservative
    edit(repo, "pkg/core.py")
    assert key(repo, family, test_id=f"{test_file}::test_f").digest != before.digest


def test_a_test_file_outside_the_files_read_makes_its_key_conservative(repo, family) -> None:
    test_file = "dist/test_core.py"  # the root's dist/ is an output folder, never indexed
    (repo / "dist").mkdir()
    (repo / test_file).write_text((repo / "tests/test_core.py").read_text())
    found = key(repo, family, test_id=f"{test_file}::test_f")
    assert found.conservative == (f"{test_file}: not among the repository's files that were read",)


PLUGIN = "pkg/verdict.py"  # a session plugin that imports a module of its own
PLUGIN_SOURCE = "from pkg import verdict_rules\n\ndef pytest_sessionfinish(session):\n    pass\n"
LOADS_THE_PLUGIN = [
    pytest.param("suite", id="-p in the family's suite arguments"),
    pytest.param("addopts", id="-p in the pytest configuration's addopts"),
    pytest.param("pytest_plugins", id="pytest_plugins in a conftest"),
]


@pytest.mark.parametrize("how", LOADS_THE_PLUGIN)
@pytest.mark.parametrize("changed", [PLUGIN, "pkg/verdict_rules.py"])
def test_a_plugin_loaded_by_name_is_in_the_key(repo, family, how, changed) -> None:
    """pytest imports a plugin by its module name, not through an import statement: the failure
    corpus's verdict family (-p mathkit.verdict) fails its session in a PR that no test imports."""
    (repo / PLUGIN).write_text(PLUGIN_SOURCE)
    (repo / "pkg/verdict_rules.py").write_text("RULES = 1\n")
    if how == "suite":
        family = dataclasses.replace(
            family, suites=(SuiteRef("tests", args=("-p", "pkg.verdict")),)
        )
    elif how == "addopts":
        edit(repo, "pyproject.toml", "")
        text = (repo / "pyproject.toml").read_text().replace('"-ra"', '"-ra -p pkg.verdict"')
        (repo / "pyproject.toml").write_text(text)
    else:
        (repo / "tests/conftest.py").write_text('pytest_plugins = ["pkg.verdict"]\n')
    before = key(repo, family)
    assert not before.conservative, before.conservative
    edit(repo, changed)
    assert changed_inputs(before, key(repo, family)) == [f"files changed: {changed}"]


def test_pytests_own_variables_are_in_the_key(repo, family) -> None:
    """PYTEST_ADDOPTS can load a plugin (-p) or change the options of every session."""
    other = dataclasses.replace(
        ENVIRONMENT, variables={**ENVIRONMENT.variables, "PYTEST_ADDOPTS": "-x"}
    )
    assert changed_inputs(key(repo, family), key(repo, family, other)) == ["environment changed"]


# Each family of calls, reached every way a module can name it: through its module, by its bare
# name, through an alias of the module, as an attribute of such an alias, through a name bound
# to it. ``{call}`` is the call's spelling, ``{imports}`` what makes that spelling mean it.
REACHED = [
    pytest.param("import {module}", "{module}.{name}", id="through its module"),
    pytest.param("from {module} import {name}", "{name}", id="by its bare name"),
    pytest.param("from {module} import {name} as alias", "alias", id="by an alias of it"),
    pytest.param("import {module} as m", "m.{name}", id="as an attribute of an alias"),
    pytest.param("import {module}\nbound = {module}.{name}", "bound", id="by a name bound to it"),
]


def facts_of(tmp_path: Path, imports: str, call: str, module: str, name: str, arguments: str):
    source = imports.format(module=module, name=name) + "\n\n"
    source += f"def f(value):\n    return {call.format(module=module, name=name)}({arguments})\n"
    (tmp_path / "m.py").write_text(source)
    return module_facts(str(tmp_path), "m.py")


@pytest.mark.parametrize(("imports", "call"), REACHED)
@pytest.mark.parametrize(
    ("module", "name", "arguments", "blind"),
    [
        ("importlib", "import_module", "value", "import_module() of a computed name"),
        ("subprocess", "run", "[value]", "() of a computed program"),
        ("subprocess", "check_output", "value.strip()", "may run repository code"),
        ("os", "system", "value.strip()", "may run repository code"),
        ("runpy", "run_path", "value", "run_path() of a computed name"),
    ],
)
def test_a_blind_call_is_blind_however_it_is_reached(
    tmp_path, imports, call, module, name, arguments, blind
) -> None:
    facts = facts_of(tmp_path, imports, call, module, name, arguments)
    assert any(blind in why for why in facts.blind + facts.observed), facts


@pytest.mark.parametrize(("imports", "call"), REACHED)
def test_an_environment_read_is_followed_however_it_is_reached(tmp_path, imports, call) -> None:
    facts = facts_of(tmp_path, imports, call, "os", "getenv", '"PKG_LEVEL"')
    assert facts.environment == ("PKG_LEVEL",)


@pytest.mark.parametrize(
    ("imports", "mapping"),
    [
        pytest.param("import os", "os.environ", id="through its module"),
        pytest.param("from os import environ", "environ", id="by its bare name"),
        pytest.param("from os import environ as env", "env", id="by an alias of it"),
        pytest.param("import os as o", "o.environ", id="as an attribute of an alias"),
        pytest.param("import sys", 'sys.modules["os"].environ', id="any object's environ"),
    ],
)
@pytest.mark.parametrize("read", ['{}["PKG_LEVEL"]', '{}.get("PKG_LEVEL")', '"PKG_LEVEL" in {}'])
def test_a_read_of_the_environment_mapping_is_followed_however_it_is_reached(
    tmp_path, imports, mapping, read
) -> None:
    (tmp_path / "m.py").write_text(f"{imports}\n\ndef f():\n    return {read.format(mapping)}\n")
    assert module_facts(str(tmp_path), "m.py").environment == ("PKG_LEVEL",)


@pytest.mark.parametrize(("imports", "call"), REACHED)
@pytest.mark.parametrize(
    ("module", "name"),
    [("importlib.resources", "files"), ("pkgutil", "get_data"), ("importlib_resources", "files")],
)
def test_a_resource_call_names_its_package_however_it_is_reached(
    tmp_path, imports, call, module, name
) -> None:
    facts = facts_of(tmp_path, imports, call, module, name, '"pkg.data"')
    assert facts.resources == ("pkg.data",)
    assert not facts_of(tmp_path, imports, call, module, name, "value").resources  # computed:
    assert any("of a computed package" in why for why in module_facts(str(tmp_path), "m.py").blind)


@pytest.mark.parametrize(("imports", "call"), REACHED)
def test_a_native_library_load_is_seen_however_it_is_reached(tmp_path, imports, call) -> None:
    assert facts_of(tmp_path, imports, call, "ctypes", "CDLL", "value").loads_native


@pytest.mark.parametrize(
    "write",
    [
        "os.environ.setdefault(name, value)",
        "os.environ[name] = value",
        "os.environ.update({name: value})",
        "environ.setdefault(name, value)",
    ],
)
def test_a_write_to_the_environment_is_not_a_read(repo, family, write) -> None:
    """An env-file conftest (``for k, v in pairs: os.environ.setdefault(k, v)``) once made every
    key conservative as "a variable read by a computed name"."""
    (repo / "conftest.py").write_text(
        f"import os\nfrom os import environ\n\nfor name, value in [('A', '1')]:\n    {write}\n"
    )
    assert key(repo, family).conservative == ()
    (repo / "conftest.py").write_text("import os\n\nfor name in ['A']:\n    os.environ[name]\n")
    assert key(repo, family).conservative  # the negative control: a computed read is blind


@pytest.mark.parametrize(
    ("command", "conservative"),
    [
        pytest.param('[sys.executable, "-V"]', False, id="the interpreter with options only"),
        pytest.param('[sys.executable, "-sS", "-c", "import platform"]', False, id="options, -c"),
        pytest.param('[sys.executable, "pkg/unrelated.py"]', False, id="a repository script"),
        pytest.param('[sys.executable, "missing.py"]', True, id="a script that is not ours"),
        pytest.param("[sys.executable, script]", True, id="a computed script"),
    ],
)
def test_a_python_child_is_followed_when_what_it_runs_is_known(
    repo, family, command, conservative
) -> None:
    (repo / "pkg/spawner.py").write_text(
        f"import subprocess, sys\n\ndef run(script):\n    subprocess.run({command})\n"
    )
    edit(repo, "pkg/deep.py", "import pkg.spawner\n")
    before = key(repo, family)
    assert bool(before.conservative) == conservative, before.conservative
    if not conservative and "unrelated" in command:  # the script is read as an import
        edit(repo, "pkg/unrelated.py")
        assert changed_inputs(before, key(repo, family)) == ["files changed: pkg/unrelated.py"]


def test_package_resources_and_native_libraries_are_in_the_key(repo, family) -> None:
    (repo / "pkg/data").mkdir()
    (repo / "pkg/data/table.json").write_text("{}\n")
    (repo / "pkg/_speed.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")
    (repo / "native").mkdir()
    (repo / "native/libm.so.6").write_bytes(b"\x7fELF")
    (repo / "pkg/res_user.py").write_text(
        "from importlib.resources import files\n\n"
        'def table():\n    return files("pkg.data").joinpath("table.json").read_text()\n'
    )
    (repo / "pkg/native_user.py").write_text(
        "import ctypes\n\ndef load(path):\n    return ctypes.CDLL(path)\n"
    )
    edit(repo, "pkg/deep.py", "import pkg.res_user\nfrom pkg import _speed\n")
    before = key(repo, family)
    assert not before.conservative, before.conservative
    files = set(before.files)
    assert {"pkg/data/table.json", "pkg/_speed.cpython-311-x86_64-linux-gnu.so"} <= files
    assert "native/libm.so.6" not in files  # nothing loads a library by ctypes yet
    edit(repo, "pkg/deep.py", "import pkg.native_user\n")
    assert "native/libm.so.6" in key(repo, family).files


def test_paths_a_configuration_file_names_are_in_the_key(repo, family) -> None:
    """A settings file beside a module names a data path; pyproject.toml's tool table names an
    env file; a path named that does not exist yet is in as absent (creating it re-runs)."""
    (repo / "pkg/settings.ini").write_text("[data]\nprices = data/prices.csv\nnew = data/x.csv\n")
    (repo / "data/prices.csv").write_text("1,2\n")
    (repo / "config").mkdir()
    (repo / "config/test.env").write_text("A=1\n")
    edit(repo, "pyproject.toml", '[tool.pkg]\nenv_file = "config/test.env"\n')
    before = key(repo, family)  # pkg/core.py locates itself: pkg/settings.ini is in
    assert {"pkg/settings.ini", "data/prices.csv", "config/test.env"} <= set(before.files)
    for changed in ("data/prices.csv", "config/test.env"):
        edit(repo, changed)
        after = key(repo, family)
        assert changed_inputs(before, after) == [f"files changed: {changed}"]
        before = after
    (repo / "data/x.csv").write_text("new\n")
    after = key(repo, family)
    assert changed_inputs(before, after) == ["files changed: data/x.csv"]
    edit(repo, "docs/notes.md")  # the negative control: a file no configuration names
    assert key(repo, family).digest == after.digest


@pytest.mark.parametrize(
    ("name", "text"),
    [
        pytest.param(
            "settings.yaml",
            '# the notes: "docs/notes.md"\nprices: data/prices.csv  # not "docs/notes.md"\n',
            id="YAML",
        ),
        pytest.param(
            "settings.ini",
            '; the notes: "docs/notes.md"\n[data]\nprices = data/prices.csv\n',
            id="INI",
        ),
    ],
)
def test_a_configuration_files_comments_name_no_paths(repo, family, name, text) -> None:
    """A comment is never a value code reads: a path only a comment names stays out (else a
    catalog's comments would tie every test to the docs), the values' paths are in."""
    (repo / "pkg" / name).write_text(text)
    (repo / "data/prices.csv").write_text("1,2\n")
    before = key(repo, family)  # pkg/core.py locates itself: the settings file is in
    assert {f"pkg/{name}", "data/prices.csv"} <= set(before.files)
    assert "docs/notes.md" not in before.files
    edit(repo, "docs/notes.md")
    assert key(repo, family).digest == before.digest


def test_an_observed_run_adds_what_it_opened_and_a_computed_program_needs_one(repo, family) -> None:
    observed = Observation(files=("data/other.yaml",))
    before = key(repo, family, observed=observed)
    assert "data/other.yaml" in before.files and json.loads(before.parts["observed"]) == [
        "data/other.yaml"
    ]
    edit(repo, "data/other.yaml")
    assert changed_inputs(before, key(repo, family, observed=observed)) == [
        "files changed: data/other.yaml"
    ]
    assert key(repo, family).digest != before.digest  # unobserved: the static key alone
    (repo / "pkg/runs.py").write_text(
        "import subprocess\n\ndef run(path):\n    ld = path.upper()\n    subprocess.run([ld])\n"
    )
    edit(repo, "pkg/deep.py", "import pkg.runs\n")
    assert any("no observed run" in why for why in key(repo, family).conservative)
    assert key(repo, family, observed=Observation()).conservative == ()
    started = Observation(started=("python tools/x.py",))
    assert key(repo, family, observed=started).conservative == (
        "observed: started python tools/x.py",
    )


def test_an_extension_module_an_import_names_is_in_the_key(repo, family) -> None:
    """``from pkg.fast import _speed`` where ``pkg/fast/`` holds only the compiled module (no
    ``__init__.py`` beside it to bring it in as a file beside a module)."""
    (repo / "pkg/fast").mkdir()
    library = "pkg/fast/_speed.cpython-311-x86_64-linux-gnu.so"
    (repo / library).write_bytes(b"\x7fELF")
    edit(repo, "pkg/deep.py", "from pkg.fast import _speed\n")
    before = key(repo, family)
    assert library in before.files
    (repo / library).write_bytes(b"\x7fELF2")
    assert changed_inputs(before, key(repo, family)) == [f"files changed: {library}"]


# ------------------------------------------------------------------ star imports


@pytest.mark.parametrize("layout", ["", "src/"])
def test_a_star_import_of_a_package_runs_its_submodules(tmp_path, layout) -> None:
    """``from pkg import *`` imports each submodule ``pkg.__all__`` names, so every module of
    the package's folder is in the importer's closure (read conservatively: all of them), where
    the index maps the package (a ``src/`` layout too); a star import of a module, or a member
    imported by name, takes only that module and its packages."""
    files = {
        f"{layout}pkg/__init__.py": '__all__ = ["tools"]\n',
        f"{layout}pkg/tools.py": "X = 1\n",
        f"{layout}pkg/deep/__init__.py": "",
        f"{layout}pkg/deep/more.py": "",
        f"{layout}pkgs/other.py": "",
        "tests/test_star.py": "from pkg import *\n",
        "tests/test_module_star.py": "from pkg.tools import *\n",
        "tests/test_named.py": "from pkg import tools\n",
    }
    write_tree(tmp_path, files)
    package = {path for path in files if path.startswith(f"{layout}pkg/")}
    assert import_closure(str(tmp_path), "tests/test_star.py") == {"tests/test_star.py", *package}
    for importer in ("tests/test_module_star.py", "tests/test_named.py"):
        assert import_closure(str(tmp_path), importer) == {
            importer,
            f"{layout}pkg/__init__.py",
            f"{layout}pkg/tools.py",
        }
