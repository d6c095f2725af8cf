"""The promises of the dependency key's helpers that its planted regressions leave open (issue 50):

- what changed between two environments names each distribution that came, went or changed
  version, in either direction, and nothing when they are equal; this process's environment
  names every installed distribution and the running Python;
- a family's inputs survive their trip through a matrix entry; ``-p NAME`` and ``-pNAME`` name
  plugins, ``-p no:NAME`` and every other argument do not;
- a key's digests are 128 bits whatever order its parts come in (a key read back from the
  ledger has them sorted); a key and its inputs are values: their cached digests cannot go stale;
- a module or package named by pytest or a resource call is the repository's file or folder of
  that name nearest the root (at any depth), in a src layout and in a repository that is
  itself the package;
- the paths a configuration file names: a file (and the configuration files it names in turn,
  but no data file's text), a folder's files (not from pyproject.toml), an absent path-like
  value as absent; never the repository root, a path outside it, or a value that is no path;
  a configuration file that cannot be parsed or read is read as text or as naming nothing;
- what a test session loads by configuration (an entry point's module, ``-p`` in addopts, a
  malformed pytest.ini) stays in, and so does a configuration file a module also reads by
  literal, with the paths it names;
- a run that started a program the static reading already follows adds what it opened;
- why a key is not reused names every changed part, the first reason it is conservative, and
  up to five files with the count of the others.

Through the module's public names on small repositories written here."""

from __future__ import annotations

import dataclasses
import json
import platform
import re
from pathlib import Path

import pytest
from helpers.files import write_tree
from hypothesis import given, settings
from hypothesis import strategies as st

from stagebot.harness.reuse.dependency_key import (
    DependencyKey,
    Environment,
    FamilyInputs,
    Observation,
    Repository,
    changed_inputs,
    changed_lines,
    code_digest,
    config_named,
    current_environment,
    dependency_key,
    plugins_named,
)

TEST_ID = "tests/test_a.py::test_a"
FAMILY = FamilyInputs("CPU-Unit", "CPU", suite_args="s1", entry="e1")
ENVIRONMENT = Environment((("numpy", "2.1.0"),), "3.11.9", "Linux-x86_64", "CPU", "none")
BASE = {"tests/test_a.py": "from pkg import core\n\ndef test_a():\n    core.f()\n"}
BASE["pkg/__init__.py"] = ""
BASE["pkg/core.py"] = "def f():\n    return 1\n"


def key_of(root: Path, family: FamilyInputs = FAMILY, **kwargs) -> DependencyKey:
    environment = kwargs.pop("environment", ENVIRONMENT)
    return dependency_key(Repository(root), TEST_ID, family, environment, **kwargs)


def edit(root: Path, name: str) -> None:
    (root / name).write_text((root / name).read_text() + "\n# changed\n")


# ---------------------------------------------------------------- the environment


def lines(**distributions: str) -> list[str]:
    env = Environment(tuple(sorted(distributions.items())), "3.11.9", "Linux-x86_64", "H200", "1")
    return env.lines()


def test_what_changed_names_each_distribution_that_came_went_or_changed_either_way() -> None:
    then = lines(numpy="2.1.0", torch="2.13.1", old="1.0.0", same="3.3.0")
    now = lines(numpy="2.0.9", torch="2.13.2", kernels="0.19.1", same="3.3.0")
    assert changed_lines(then, now) == (
        "kernels 0.19.1 (new), numpy 2.1.0 -> 2.0.9, old 1.0.0 (gone), torch 2.13.1 -> 2.13.2"
    )
    assert changed_lines(then, list(then)) is None


VERSIONS = st.sampled_from(["1.0", "1.10", "2.0.1"])  # never one character: no interned strings


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["numpy", "torch", "triton"]), VERSIONS),
    st.dictionaries(st.sampled_from(["numpy", "torch", "triton"]), VERSIONS),
)
def test_what_changed_is_nothing_exactly_when_equal_and_names_only_what_differs(then, now) -> None:
    found = changed_lines(lines(**then), lines(**now))
    assert (found is None) == (then == now)
    named = [change.split(" ")[0] for change in (found or "").split(", ") if change]
    differ = [name for name in then.keys() | now.keys() if then.get(name) != now.get(name)]
    assert named == sorted(differ)


def test_this_process_environment_names_its_distributions_and_python() -> None:
    environment = current_environment("H200", "570.1")
    versions = dict(environment.distributions)
    assert versions["pytest"] == pytest.__version__
    assert "hypothesis" in versions and "stagebot" in versions
    assert environment.python == platform.python_version()
    assert (environment.gpu_type, environment.gpu_driver) == ("H200", "570.1")


# ---------------------------------------------------------------- the family and its plugins


def test_a_familys_inputs_survive_a_matrix_entry() -> None:
    family = FamilyInputs("F", "H200", "s", "e", (("tests/a.py::*", "flaky"),), ("pkg.plug",))
    data = json.loads(json.dumps(family.to_json()))
    waives = [{"test_id": "tests/a.py::*", "reason": "flaky"}]
    assert FamilyInputs.from_json(data, waives) == family


@pytest.mark.parametrize(
    ("args", "plugins"),
    [
        pytest.param(["-p", "pkg.a", "-ppkg.b"], ("pkg.a", "pkg.b"), id="-p NAME and -pNAME"),
        pytest.param(["-pfoo", "--tb", "short", "-x", "bar"], ("foo",), id="a glued name only"),
        pytest.param(["-q", "bar", "--maxfail", "3", "-a", "b"], (), id="other options"),
        pytest.param(["-p", "no:cacheprovider", "-pno:randomly"], (), id="no: disables"),
        pytest.param(["-x", "-p"], (), id="-p last names nothing"),
        pytest.param(["-p", "a", "-pa", "-p", "b"], ("a", "b"), id="each once, in order"),
    ],
)
def test_the_plugins_pytest_arguments_load_by_name(args, plugins) -> None:
    assert plugins_named(args) == plugins


OTHER_ARGS = st.sampled_from(["-q", "-x", "--tb", "short", "-k", "not slow", "--maxfail=2", "-ra"])
PLUGIN = st.from_regex(r"[a-z][a-z_.]{0,8}", fullmatch=True)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(OTHER_ARGS, max_size=3), PLUGIN, st.booleans()), max_size=4))
def test_every_plugin_named_among_other_arguments_is_found(runs) -> None:
    args = []
    for others, name, glued in runs:
        args += [*others, *([f"-p{name}"] if glued else ["-p", name])]
    assert plugins_named(args) == tuple(dict.fromkeys(name for _, name, _ in runs))


# ---------------------------------------------------------------- digests and values


def test_a_keys_digests_are_128_bits_whatever_the_order_of_its_parts(tmp_path) -> None:
    key = key_of(write_tree(tmp_path, BASE))
    assert re.fullmatch("[0-9a-f]{32}", key.digest) and re.fullmatch("[0-9a-f]{32}", key.code)
    stored = dataclasses.replace(key, parts=dict(sorted(key.parts.items())))  # as the ledger
    assert list(stored.parts) != list(key.parts)
    assert (stored.digest, stored.code) == (key.digest, key.code)
    assert code_digest(stored.parts) == key.code


def test_a_key_and_its_inputs_are_values(tmp_path) -> None:
    """An environment and a test file's inputs cache their digests: changing one afterwards
    would leave a stale digest, so none can be changed."""
    repo = Repository(write_tree(tmp_path, BASE))
    inputs = repo.inputs("tests/test_a.py")
    for value, field in [
        (ENVIRONMENT, "variables"),
        (inputs, "files"),
        (FAMILY, "entry"),
        (key_of(tmp_path), "parts"),
    ]:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, field, {})


# ---------------------------------------------------------------- modules and packages by name


def test_a_module_named_by_pytest_is_the_repositorys_file_nearest_the_root(tmp_path) -> None:
    repo = Repository(
        write_tree(
            tmp_path,
            {
                "plugin.py": "",
                "pkg/plugin.py": "",
                "pkg/deep/plugin.py": "",
                "testing/own.py": "",  # the repository is itself the package "ours"
            },
        )
    )
    assert repo.module_file("plugin") == ["plugin.py"]
    assert repo.module_file("pkg.plugin") == ["pkg/plugin.py"]
    assert repo.module_file("ours.testing.own") == ["testing/own.py"]
    assert repo.module_file("xdist") == []  # an installed plugin


def test_a_package_is_its_folder_nearest_the_root_in_any_layout(tmp_path) -> None:
    repo = Repository(
        write_tree(
            tmp_path,
            {
                "src/pkg/res/a.txt": "",
                "zz/res/b.txt": "",  # "res", but not pkg's
                "other/pkg/res/c.txt": "",
                "deeper/x/pkg/res/d.txt": "",
                "tools/pkg/e.txt": "",
            },
        )
    )
    assert repo.package_folder("pkg.res") == ["other/pkg/res", "src/pkg/res"]
    assert repo.package_folder("res") == ["zz/res"]
    assert repo.package_folder("x.pkg.res") == ["deeper/x/pkg/res"]
    assert repo.package_folder("pkg") == ["other/pkg", "src/pkg", "tools/pkg"]
    assert repo.package_folder("nothing.res") == []


def test_a_package_folder_is_found_at_any_depth(tmp_path) -> None:
    """300 folders deep: past the small integers CPython shares, depths compare by value."""
    deep = "/".join(["d"] * 300) + "/pkg/res"
    repo = Repository(write_tree(tmp_path, {f"{deep}/a.txt": ""}))
    assert repo.package_folder("pkg.res") == [deep]


def test_the_resources_of_a_package_in_a_src_layout_are_in_the_key(tmp_path) -> None:
    files = {
        **BASE,
        "src/pkg/__init__.py": "",
        "src/pkg/data/table.json": "{}\n",
        "pkg/core.py": (
            "from importlib.resources import files\n\n"
            'def f():\n    return files("pkg.data").joinpath("table.json").read_text()\n'
        ),
    }
    root = write_tree(tmp_path, files)
    before = key_of(root)
    assert not before.conservative and "src/pkg/data/table.json" in before.files
    edit(root, "src/pkg/data/table.json")
    assert changed_inputs(before, key_of(root)) == ["files changed: src/pkg/data/table.json"]


def test_a_literal_naming_the_root_or_above_names_no_data(tmp_path) -> None:
    core = 'HERE, UP, OUT = ".", "..", "../x.txt"\n\ndef f():\n    return 1\n'
    root = write_tree(tmp_path, {**BASE, "pkg/core.py": core, "docs/notes.md": "n\n"})
    assert "docs/notes.md" not in key_of(root).files


@pytest.mark.parametrize("folder", ["-data", "!data", "data", "~data"])
def test_the_files_beside_a_module_are_those_of_its_own_folder(tmp_path, folder) -> None:
    root = write_tree(
        tmp_path,
        {
            "conftest.py": "import os\nHERE = os.path.dirname(__file__)\n",
            "beside.txt": "",
            f"{folder}/x.txt": "",
        },
    )
    assert Repository(root).data_files("conftest.py") == {"beside.txt"}


# ---------------------------------------------------------------- paths a configuration names


def named(root: Path, files: dict[str, str], configs: list[str]) -> set[str]:
    return config_named(Repository(write_tree(root, files)), configs)


DATA = {"data/x.txt": "", "data/y.csv": "", "docs/notes.md": "", "pkg/core.py": ""}


def test_a_configuration_names_files_and_the_files_of_folders(tmp_path) -> None:
    files = {**DATA, "app.toml": 'data = "data"\nnotes = "docs/notes.md"\n'}
    assert named(tmp_path, files, ["app.toml"]) == {"data/x.txt", "data/y.csv", "docs/notes.md"}


def test_pyprojects_tool_tables_name_files_but_not_folders(tmp_path) -> None:
    files = {**DATA, "pyproject.toml": '[tool.own]\nsrc = "data"\nnotes = "docs/notes.md"\n'}
    assert named(tmp_path, files, ["pyproject.toml"]) == {"docs/notes.md"}


def test_a_named_configuration_is_read_in_turn_and_a_named_data_file_is_not(tmp_path) -> None:
    files = {
        **DATA,
        "a.ini": "[x]\nnext = b.yaml\nnotes = data/x.txt\n",
        "b.yaml": "table: data/y.csv\n",
        "data/x.txt": 'see "docs/notes.md"\n',
    }
    assert named(tmp_path, files, ["a.ini"]) == {"b.yaml", "data/y.csv", "data/x.txt"}


def test_a_value_naming_the_root_or_outside_it_names_nothing(tmp_path) -> None:
    files = {**DATA, "c.ini": "[x]\nroot = .\nup = ..\nout = ../outside.txt\n"}
    files["conf/d.json"] = json.dumps({"up": "..", "b": "/etc/passwd", "c": "../../up.txt"})
    assert named(tmp_path, files, ["c.ini", "conf/d.json"]) == set()


@pytest.mark.parametrize(
    ("value", "absent"),
    [
        pytest.param("out/later", True, id="a path"),
        pytest.param("later.csv", True, id="a file name"),
        pytest.param("fast", False, id="a word"),
        pytest.param("hello world.csv", False, id="words"),
        pytest.param("${HOME}/x.csv", False, id="a variable"),
        pytest.param("http://host/x.csv", False, id="a URL"),
        pytest.param("a|b.csv", False, id="a pattern"),
    ],
)
def test_an_absent_path_like_value_is_named_as_absent(tmp_path, value, absent) -> None:
    found = named(tmp_path, {"s.json": json.dumps({"v": value})}, ["s.json"])
    assert found == ({value} if absent else set())


def test_a_value_of_one_to_200_characters_may_name_a_path(tmp_path) -> None:
    long = "data/" + "x" * 191 + ".txt"  # 200 characters
    files = {"a": "", long: "", long + "x": "", "pkg/other.txt": ""}
    files["s.json"] = json.dumps([long, long + "x", "a"])
    files["pkg/empty.json"] = json.dumps({"none": ""})  # "" would name its own folder
    assert len(long) == 200
    assert named(tmp_path, files, ["s.json", "pkg/empty.json"]) == {long, "a"}


def test_a_configuration_is_read_for_paths_up_to_its_first_256000_characters(tmp_path) -> None:
    files = {"data/a.txt": "", "data/b.txt": ""}
    files["a.ini"] = "x" * (256_000 - 12) + '"data/a.txt"'  # ends at the limit
    files["b.ini"] = "x" * (256_001 - 12) + '"data/b.txt"'  # one character past it
    assert len(files["a.ini"]) == 256_000
    assert named(tmp_path, files, ["a.ini", "b.ini"]) == {"data/a.txt"}


@pytest.mark.parametrize(
    ("name", "text"),
    [
        pytest.param("s.toml", 'data = "data/x.txt"\n[broken\n', id="TOML"),
        pytest.param("s.yaml", 'data: "data/x.txt"\n  - [broken\n', id="YAML"),
        pytest.param("s.json", '{"k": "data/x.txt",\n', id="JSON"),
    ],
)
def test_a_configuration_that_does_not_parse_is_read_as_text(tmp_path, name, text) -> None:
    assert named(tmp_path, {**DATA, name: text}, [name]) == {"data/x.txt"}


def test_a_configuration_that_vanished_names_nothing(tmp_path) -> None:
    repo = Repository(write_tree(tmp_path, {**DATA, "s.ini": "[x]\na = data/x.txt\n"}))
    (tmp_path / "s.ini").unlink()
    assert config_named(repo, ["s.ini"]) == set()


# ---------------------------------------------------------------- what a session loads


def test_a_configuration_read_by_literal_too_stays_in_with_what_it_names(tmp_path) -> None:
    """A module reading setup.cfg (a pytest configuration, in every key) by name, whose section
    names a data file: both stay in."""
    core = 'import configparser\n\nCFG = "setup.cfg"\n'
    files = {**BASE, "pkg/core.py": core, "setup.cfg": "[own]\ntable = data/table.csv\n"}
    root = write_tree(tmp_path, {**files, "data/table.csv": "1\n"})
    before = key_of(root)
    assert {"setup.cfg", "data/table.csv"} <= set(before.files)
    for changed in ("setup.cfg", "data/table.csv"):
        edit(root, changed)
        after = key_of(root)
        assert changed_inputs(before, after) == [f"files changed: {changed}"]
        before = after


PLUGIN_FILES = {**BASE, "pkg/plugin.py": "def pytest_configure(config):\n    pass\n"}


@pytest.mark.parametrize(
    ("config", "text"),
    [
        pytest.param(
            "pyproject.toml",
            '[project.entry-points.pytest11]\nours = "pkg.plugin:Plugin"\n',
            id="an entry point naming an attribute",
        ),
        pytest.param(
            "pyproject.toml",
            '[tool.pytest.ini_options]\naddopts = "-p pkg.plugin --co \'"\n',
            id="addopts with unbalanced quotes",
        ),
        pytest.param("pytest.ini", "[pytest]\naddopts = -p pkg.plugin\n", id="pytest.ini"),
    ],
)
def test_a_plugin_a_session_loads_by_configuration_is_in_the_key(tmp_path, config, text) -> None:
    root = write_tree(tmp_path, {**PLUGIN_FILES, config: text})
    before = key_of(root)
    assert not before.conservative and "pkg/plugin.py" in before.files
    edit(root, "pkg/plugin.py")
    assert changed_inputs(before, key_of(root)) == ["files changed: pkg/plugin.py"]


def test_a_malformed_pytest_ini_is_still_in_the_key(tmp_path) -> None:
    root = write_tree(tmp_path, {**BASE, "pytest.ini": "addopts = -p pkg.core\n"})  # no section
    before = key_of(root)
    assert "pytest.ini" in before.files
    edit(root, "pytest.ini")
    assert changed_inputs(before, key_of(root)) == ["files changed: pytest.ini"]


def test_a_run_that_started_a_followed_program_adds_what_it_opened(tmp_path) -> None:
    root = write_tree(tmp_path, {**BASE, "data/seen.txt": "1\n"})
    observed = Observation(files=("data/seen.txt",), started=("python -m pkg.core",))
    key = key_of(root, observed=observed)
    assert key.conservative == () and "data/seen.txt" in key.files


# ---------------------------------------------------------------- why a key is not reused


def test_why_names_every_changed_part(tmp_path) -> None:
    root = write_tree(tmp_path, BASE)
    before = key_of(root)
    environment = dataclasses.replace(ENVIRONMENT, python="3.12.1", gpu_driver="575.1")
    after = key_of(root, dataclasses.replace(FAMILY, entry="e2"), environment=environment)
    assert changed_inputs(before, after) == [
        "catalog changed",
        "environment changed",
        "gpu changed",
    ]


def test_why_names_the_first_reason_a_key_became_conservative(tmp_path) -> None:
    before = key_of(write_tree(tmp_path, BASE))
    reasons = ("pkg/a.py: line 1: first", "pkg/b.py: line 2: second")
    files = {**before.files, "docs/notes.md": "d"}
    after = dataclasses.replace(
        before, parts={**before.parts, "files": "other"}, files=files, conservative=reasons
    )
    assert changed_inputs(before, after) == [
        "files: conservative now (pkg/a.py: line 1: first)",
        "files changed: docs/notes.md",
    ]


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        (1, "f00"),
        (5, "f00, f01, f02, f03, f04"),
        (6, "f00, f01, f02, f03, f04 and 1 more"),
        (8, "f00, f01, f02, f03, f04 and 3 more"),
        (11, "f00, f01, f02, f03, f04 and 6 more"),
    ],
)
def test_why_names_five_files_and_counts_the_others(tmp_path, count, shown) -> None:
    before = key_of(write_tree(tmp_path, BASE))
    added = {f"f{n:02}": "d" for n in range(count)}  # new files: none of them in ``before``
    after = dataclasses.replace(
        before, parts={**before.parts, "files": "other"}, files={**before.files, **added}
    )
    assert changed_inputs(before, after) == [f"files changed: {shown}"]
    assert changed_inputs(after, before) == [f"files changed: {shown}"]  # or removed


def test_why_a_changed_file_set_with_equal_files_says_so(tmp_path) -> None:
    before = key_of(write_tree(tmp_path, BASE))
    after = dataclasses.replace(before, parts={**before.parts, "files": "other"})
    assert changed_inputs(before, after) == ["files: the set changed"]
