"""The promises of the dependency key and the import graph, stated as properties (issue 50):

- a key part that changes changes the lookup: the test, its files, the suites' arguments and the
  catalog part each change the code key a plan looks a pass up by; the environment and the GPU
  change only the whole key (the runner compares them);
- every pytest configuration file at the root is in every test's key, each kind alone;
- a relative import (``from .. import x``, ``from .m import y``) names the module in the folder
  the dots lead to, at any depth, from a module or a package's ``__init__.py``;
- an absolute import names, of the files whose dotted path ends with it, the one nearest the
  root (through a package-dir mapping too), and no deeper namesake; a module of any name, a
  package or an extension module, is among the files an import of it brings in, and its
  sibling that no import names is not.

Through the public functions (``dependency_key``, ``import_closure``) on small repositories
written here; the kinds of configuration file and the part names are listed here on purpose,
not read from the module under test."""

from __future__ import annotations

import keyword
from dataclasses import replace
from pathlib import Path

import pytest
from helpers.files import write_tree
from hypothesis import given, settings
from hypothesis import strategies as st

from stagebot.harness.reuse.dependency_key import Environment, FamilyInputs, dependency_key
from stagebot.harness.reuse.import_graph import import_closure

TEST_ID = "tests/test_core.py::test_f"
FAMILY = FamilyInputs("CPU-Py", "CPU", suite_args="s1", entry="e1")
ENVIRONMENT = Environment((("numpy", "2.0"),), "3.11.9", "Linux-x86_64", "CPU", "none")


BASE = {"tests/test_core.py": "from pkg import core\n\ndef test_f():\n    assert core.f()\n"}
BASE["pkg/core.py"] = "def f():\n    return 1\n"

# the code key (the lookup) must change with these parts; environment and gpu leave it
IN_LOOKUP = {"test", "files", "suite_args", "catalog entry", "catalog waive"}
NOT_IN_LOOKUP = {"environment", "gpu"}


def changed(root: Path, part: str) -> tuple[str, FamilyInputs, Environment]:
    """The key's inputs with ``part`` changed (a file changed on disk for ``files``)."""
    test_id, family, environment = TEST_ID, FAMILY, ENVIRONMENT
    if part == "test":
        test_id = "tests/test_core.py::test_g"
    elif part == "files":
        (root / "pkg/core.py").write_text("def f():\n    return 2\n")
    elif part == "suite_args":
        family = replace(FAMILY, suite_args="s2")
    elif part == "catalog entry":
        family = replace(FAMILY, entry="e2")
    elif part == "catalog waive":
        family = replace(FAMILY, waives=((TEST_ID, "known bad"),))
    elif part == "environment":
        environment = replace(ENVIRONMENT, distributions=(("numpy", "2.1"),))
    else:
        environment = replace(ENVIRONMENT, gpu_driver="550.1")
    return test_id, family, environment


@pytest.mark.parametrize("part", sorted(IN_LOOKUP | NOT_IN_LOOKUP))
def test_a_key_part_that_changes_changes_the_lookup_or_only_the_runners_check(
    tmp_path: Path, part: str
) -> None:
    root = write_tree(tmp_path, BASE)
    before = dependency_key(root, TEST_ID, FAMILY, ENVIRONMENT)
    after = dependency_key(root, *changed(root, part))
    assert after.digest != before.digest, part
    assert (after.code != before.code) == (part in IN_LOOKUP), part


def test_a_waive_of_another_test_leaves_the_key_alone(tmp_path: Path) -> None:
    root = write_tree(tmp_path, BASE)
    waived = replace(FAMILY, waives=(("tests/test_other.py::*", "not this one"),))
    assert (
        dependency_key(root, TEST_ID, waived, ENVIRONMENT).code
        == dependency_key(root, TEST_ID, FAMILY, ENVIRONMENT).code
    )


@pytest.mark.parametrize(
    "config", ["pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg", "conftest.py"]
)
@pytest.mark.parametrize("test_file", ["tests/test_core.py", "tests/unit/deep/test_core.py"])
def test_every_pytest_configuration_file_is_in_every_key(tmp_path, config, test_file) -> None:
    files = {**BASE, test_file: BASE["tests/test_core.py"], config: "[pytest]\n"}
    root = write_tree(tmp_path, files)
    test_id = f"{test_file}::test_f"
    before = dependency_key(root, test_id, FAMILY, ENVIRONMENT)
    assert config in before.files
    (root / config).write_text("[pytest]\naddopts = -x\n")
    after = dependency_key(root, test_id, FAMILY, ENVIRONMENT)
    assert after.code != before.code


@settings(max_examples=80, deadline=None)
@given(
    depth=st.integers(min_value=1, max_value=4),
    data=st.data(),
    form=st.sampled_from(["from {dots} import x", "from {dots}x import y"]),
    importer=st.sampled_from(["mod.py", "__init__.py"]),
)
def test_a_relative_import_names_the_folder_its_dots_lead_to(
    tmp_path_factory, depth, data, form, importer
) -> None:
    level = data.draw(st.integers(min_value=1, max_value=depth), label="level")
    folders = [f"p{index}" for index in range(depth)]
    files = {}
    for size in range(depth + 1):  # an x.py in every folder from the root down
        files["/".join([*folders[:size], "x.py"])] = "Y = 1\n"
    here = "/".join(folders)
    files[f"{here}/{importer}"] = form.format(dots="." * level) + "\n"
    root = write_tree(tmp_path_factory.mktemp("repo"), files)
    target = "/".join([*folders[: depth - (level - 1)], "x.py"])
    found = import_closure(str(root), f"{here}/{importer}")
    xs = {path for path in found if path.endswith("x.py")}
    assert xs == {target}, (form, level, importer)


@settings(max_examples=60, deadline=None)
@given(
    depths=st.sets(st.integers(min_value=0, max_value=3), min_size=1),
    form=st.sampled_from(["import util", "from util import X", "import proj.util"]),
)
def test_an_import_names_the_module_nearest_the_root(tmp_path_factory, depths, form) -> None:
    """Of the files whose dotted path ends with the imported name, the one nearest the root is
    the module (``proj.util``: a package-dir mapping, with no ``proj`` folder, names util.py
    too), and only it: a deeper namesake is another module."""
    files = {"/".join([*(f"q{i}" for i in range(depth)), "util.py"]): "X = 1\n" for depth in depths}
    files["tests/test_a.py"] = form + "\n"
    root = write_tree(tmp_path_factory.mktemp("repo"), files)
    found = import_closure(str(root), "tests/test_a.py")
    nearest = "/".join([*(f"q{i}" for i in range(min(depths))), "util.py"])
    assert {path for path in found if path.endswith("util.py")} == {nearest}, form


NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True).filter(
    lambda name: name != "__init__" and not keyword.iskeyword(name)
)
MODULE_FILES = {
    "module": "pkg/{}.py",
    "package": "pkg/{}/__init__.py",
    "extension": "pkg/{}.cpython-311-x86_64-linux-gnu.so",
}


@settings(max_examples=60, deadline=None)
@given(
    names=st.lists(NAMES, min_size=2, max_size=2, unique=True),
    kinds=st.lists(st.sampled_from(sorted(MODULE_FILES)), min_size=2, max_size=2),
    form=st.sampled_from(["import pkg.{}", "from pkg import {}", "from pkg.{} import X"]),
)
def test_an_import_brings_in_the_module_it_names_of_any_name_and_not_its_sibling(
    tmp_path_factory, names, kinds, form
) -> None:
    """Whatever its name (capitals, underscores, digits) and whether it is a module, a package or
    an extension module, what an import names is among the files the test imports, and a
    sibling in the same package that no import names is not."""
    target, sibling = (
        MODULE_FILES[kind].format(name) for kind, name in zip(kinds, names, strict=True)
    )
    files = {"pkg/__init__.py": "", target: "X = 1\n", sibling: "X = 2\n"}
    files["tests/test_a.py"] = form.format(names[0]) + "\n"
    root = write_tree(tmp_path_factory.mktemp("repo"), files)
    found = import_closure(str(root), "tests/test_a.py")
    assert target in found and sibling not in found, (form, target, sibling, found)
