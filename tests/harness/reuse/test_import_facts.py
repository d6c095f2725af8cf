"""The import graph's promises at their edges (issue 50): which files a repository has
(``repository_files``), which module names each one answers to (``build_index``), which files an
import runs (``resolve``), and what one file's static reading tells (``module_facts``): the
strings that may name files, the environment it reads, the imports it makes by a computed name,
the programs it starts, and the functions that import or start what their callers name.

Each case is a small module written here and read through the public functions; the expected
facts are spelled out, not computed by the module under test."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from helpers.files import write_tree
from helpers.module_sources import facts_of

from stagebot.harness.reuse.import_graph import (
    ModuleFacts,
    build_index,
    import_closure,
    module_facts,
    module_index,
    repository_files,
    resolve,
)

# ------------------------------------------------------------------ the repository's files


def test_hidden_files_are_files_but_a_git_link_and_bytecode_are_not(tmp_path) -> None:
    """A dot file (``.env``, ``.coveragerc``) may be an input; a worktree's or a submodule's
    ``.git`` file and compiled bytecode anywhere are not."""
    names = (
        ".env",
        ".coveragerc",
        ".git",
        "vendor/lib/.git",
        "vendor/lib/core.py",
        "pkg/mod.py",
        "pkg/mod.pyc",
        "pkg/old.pyo",
    )
    write_tree(tmp_path, dict.fromkeys(names, "x\n"))
    assert repository_files(str(tmp_path)) == (
        ".coveragerc",
        ".env",
        "pkg/mod.py",
        "vendor/lib/core.py",
    )


def test_a_checkout_is_indexed_once(tmp_path) -> None:
    """``module_index`` reads a root once (a report's one checkout): later calls get that index."""
    facts_of(tmp_path, "X = 1\n")
    root = str(tmp_path)
    first = module_index(root)
    assert first == build_index(repository_files(root))
    assert module_index(root) is first


# ------------------------------------------------------------------ module names and resolve


def test_an_extension_module_is_indexed_by_its_module_name_at_any_depth() -> None:
    index = build_index(
        ["_speed.cpython-311-x86_64-linux-gnu.so", "pkg/sub/_fast.abi3.so", "pkg/win.pyd"]
    )
    assert index == {
        "_speed": ("_speed.cpython-311-x86_64-linux-gnu.so",),
        "pkg.sub._fast": ("pkg/sub/_fast.abi3.so",),
        "sub._fast": ("pkg/sub/_fast.abi3.so",),
        "_fast": ("pkg/sub/_fast.abi3.so",),
        "pkg.win": ("pkg/win.pyd",),
        "win": ("pkg/win.pyd",),
    }


def test_an_import_runs_the_module_and_its_packages_each_once() -> None:
    files = ["pkg/__init__.py", "pkg/sub/__init__.py", "pkg/sub/mod.py", "pkg/other.py"]
    index = build_index(files)
    assert resolve(index, "pkg.sub.mod") == files[:3]
    assert resolve(index, "pkg.sub") == files[:2]


def test_a_file_named_only_py_is_no_module_an_import_runs() -> None:
    """``.py`` has no module name: no import resolves to it, not even one the repository does not
    have or one it finds only without its first part (a package-dir mapping)."""
    index = build_index([".py", "mod.py"])
    assert resolve(index, "absent") == []
    assert resolve(index, "src.mod") == ["mod.py"]


def test_a_module_is_found_however_deep_it_lies() -> None:
    deep = "a/" * 300 + "m.py"
    assert resolve(build_index([deep]), "m") == [deep]


# ------------------------------------------------------------------ what a file's facts are


def test_the_facts_of_a_file_are_read_once_and_cannot_change(tmp_path) -> None:
    """The facts of one source are parsed once and shared by every key that reads the file, so no
    reader may change them under another."""
    facts = facts_of(tmp_path, "import os\n")
    assert module_facts(str(tmp_path), "pkg/mod.py") is facts
    with pytest.raises(dataclasses.FrozenInstanceError):
        facts.imports = ()  # type: ignore[misc]


def test_an_extension_module_names_nothing_and_does_not_locate_itself(tmp_path) -> None:
    facts = module_facts(str(tmp_path), "pkg/_speed.cpython-311-x86_64-linux-gnu.so")
    assert (facts.imports, facts.literals, facts.blind) == ((), (), ())
    assert not facts.locates_itself


def test_a_literal_of_1_to_255_characters_may_name_a_file(tmp_path) -> None:
    """A one-line string of 1 to 255 characters is read as a possible file or folder name; an
    empty one or a longer one (prose, a message) is not."""
    lengths = {"EMPTY": 0, "SHORT": 1, "LONGEST": 255, "TOO_LONG": 256, "PROSE": 300}
    source = "".join(f'{name} = "{"a" * n}"\n' for name, n in lengths.items())
    assert facts_of(tmp_path, source).literals == ("a", "a" * 255)


@pytest.mark.parametrize(
    "read", ['os.getenv("PKG_MODE", "fast")', 'os.environ.get("PKG_MODE", "")']
)
def test_an_environment_read_names_its_first_argument_not_its_default(tmp_path, read) -> None:
    assert facts_of(tmp_path, f"import os\n\nMODE = {read}\n").environment == ("PKG_MODE",)


@pytest.mark.parametrize("loop", ["_, name in PLUGINS.items()", "name in PLUGINS.values()"])
def test_a_loop_over_a_literal_tables_items_or_values_imports_its_names(tmp_path, loop) -> None:
    source = (
        "import importlib\n\n"
        'PLUGINS = {"fast": "pkg.fast_plugin", "slow": "pkg.slow_plugin"}\n\n'
        "def load_all():\n"
        f"    for {loop}:\n"
        "        importlib.import_module(name)\n"
    )
    facts = facts_of(tmp_path, source)
    assert {"pkg.fast_plugin", "pkg.slow_plugin"} <= set(facts.imports)
    assert facts.blind == ()


def test_an_import_module_through_an_object_imports_its_literal(tmp_path) -> None:
    """``self.loader.import_module("x")``: what owns it cannot be told, its name can."""
    source = (
        "import importlib\n\n"
        "class Plugins:\n"
        "    def __init__(self):\n"
        "        self.loader = importlib\n\n"
        "    def load(self):\n"
        '        return self.loader.import_module("pkg.plugin")\n'
    )
    assert "pkg.plugin" in facts_of(tmp_path, source).imports


# ------------------------------------------------------------------ an import by a computed name

IMPORTS_A_PARAMETER = "def load(path):\n    return importlib.import_module(path)\n"


@pytest.mark.parametrize(
    "path", ["pkg/Plugins.py", "pkg/__about__.py", "pkg/plugins.py", "pkg/_loader.py"]
)
def test_only_a_packages_init_imports_its_own_folder_by_dunder_name(tmp_path, path) -> None:
    """``f"{__name__}.{name}"`` names a module of the folder in an ``__init__.py`` alone: in any
    other module ``__name__`` is that module's own name, and the import is blind."""
    source = (
        'import importlib\n\ndef load(name):\n    importlib.import_module(f"{__name__}.{name}")\n'
    )
    own = facts_of(tmp_path, source, "pkg/__init__.py")
    assert "pkg.*" in own.imports and own.blind == ()
    other = facts_of(tmp_path, source, path)
    assert "pkg.*" not in other.imports
    assert other.blind == ("line 4: import_module() of a computed name",)


def test_python_c_code_imports_by_dunder_name_blindly(tmp_path) -> None:
    """In ``python -c`` code ``__name__`` is ``__main__``, never a package's folder."""
    source = (
        "import subprocess\nimport sys\n\n"
        "def run():\n"
        '    subprocess.run([sys.executable, "-c", '
        "\"import importlib; importlib.import_module(f'{__name__}.{NAME}')\"])\n"
    )
    assert facts_of(tmp_path, source).blind == (
        "line 1: import_module() of a computed name (in the python -c code)",
    )


BLIND_IMPORTS = [
    pytest.param(
        "import importlib\nimport sys\n\nimportlib.import_module(sys.argv[1])\n",
        "line 4: import_module() of a computed name",
        id="at module level",
    ),
    pytest.param(
        "import functools\nimport importlib\n\n@functools.cache\n"
        + IMPORTS_A_PARAMETER
        + '\nload("pkg/conftest.py")\n',
        "line 6: import_module() of a computed name",
        id="a decorated function's parameter: its callers cannot all be seen",
    ),
    pytest.param(
        "import importlib\n\ndef load(names):\n    return importlib.import_module(names.pick())\n"
        '\nload("pkg/conftest.py")\n',
        "line 4: import_module() of a computed name",
        id="a name computed from no parameter",
    ),
    pytest.param(
        "import runpy\n\ndef run(path):\n    return runpy.run_path(path)\n"
        '\nrun("pkg/conftest.py")\n',
        "line 4: run_path() of a computed name",
        id="a file run by a parameter's path",
    ),
]


@pytest.mark.parametrize(("source", "blind"), BLIND_IMPORTS)
def test_an_import_whose_name_no_caller_here_shows_is_blind(tmp_path, source, blind) -> None:
    facts = facts_of(tmp_path, source)
    assert (facts.blind, facts.importers) == ((blind,), ())


def test_a_helper_nested_in_a_test_imports_what_its_callers_name(tmp_path) -> None:
    """The helper, not the test around it, is the function whose calls are checked."""
    source = (
        "import importlib\n\n"
        "def test_plugins(tmp_path):\n"
        "    def load(path):\n"
        "        return importlib.import_module(path)\n"
        '    load(tmp_path / "conftest.py")\n'
    )
    facts = facts_of(tmp_path, source)
    assert (facts.blind, facts.importers) == ((), (("load", "0"),))


def test_a_collectors_method_imports_the_collected_file_whatever_decorates_it(tmp_path) -> None:
    source = (
        "import functools\nimport importlib\n\nimport pytest\n\n"
        "class Collector(pytest.Module):\n"
        "    @functools.cached_property\n"
        "    def module(self):\n"
        "        return importlib.import_module(module_name(self.path))\n"
    )
    facts = facts_of(tmp_path, source)
    assert (facts.blind, facts.importers) == ((), ())


CALL = "call"  # the importer called with a conftest file
NESTED = "nested"  # called with what a namesake's call returns (counted by name: a call of it)
PASSED = "passed"  # handed on as a value: its calls can no longer be checked
EVENTS = [seq for n in range(4) for seq in itertools.product((CALL, NESTED, PASSED), repeat=n)]


def _importer_module(events: tuple[str, ...], by_attribute: bool) -> tuple[str, int]:
    """A module whose ``load`` imports its parameter, used as ``events`` say; and the line of
    its import."""
    me, indent = ("self.", "        ") if by_attribute else ("", "    ")
    uses = {
        CALL: f'{me}load(folder / "conftest.py")',
        NESTED: f'{me}load(store.load(folder / "conftest.py"))',
        PASSED: f"list(map({me}load, paths))",
    }
    body = [uses[event] for event in events] or ["pass"]
    if by_attribute:
        head = ["class Loader:", "    def load(self, path):"]
        use = ["    def use(self, folder, store, paths):"]
    else:
        head, use = ["def load(path):"], ["def use(folder, store, paths):"]
    lines = ["import importlib", "", *head, f"{indent}return importlib.import_module(path)", ""]
    lines += use + [indent + line for line in body]
    return "\n".join(lines) + "\n", 3 + len(head)


@pytest.mark.parametrize("by_attribute", [False, True], ids=["function", "method"])
def test_an_importer_is_followed_only_when_every_use_of_it_is_a_call(
    tmp_path, by_attribute
) -> None:
    """A function that imports its parameter imports what its callers name when it is called
    here and never handed on as a value (by name or as ``self.load``), however often and in
    whatever order; otherwise the import is blind. Every sequence of up to three uses."""
    wrong = {}
    for events in EVENTS:
        source, line = _importer_module(events, by_attribute)
        facts = facts_of(tmp_path, source)
        if PASSED in events or not events:
            expected = ((f"line {line}: import_module() of a computed name",), ())
        else:
            expected = ((), (("load", "0"),))
        if (facts.blind, facts.importers) != expected:
            wrong["-".join(events) or "unused"] = (facts.blind, facts.importers)
    assert wrong == {}


def test_an_importer_is_matched_to_its_calls_by_name() -> None:
    """``blind_with`` compares names by value, whatever string object holds them."""
    name = "".join(["lo", "ad"])
    facts = ModuleFacts((), (), (), (), calls=((name, 7, False, ()),))
    assert facts.blind_with(set(), {("load", "0")}) == (
        "line 7: load() imports a module by a computed name",
    )
    given = dataclasses.replace(facts, calls=((name, 7, False, ("0",)),))
    assert given.blind_with(set(), {("load", "0")}) == ()


# ------------------------------------------------------------------ programs it starts


def test_the_innermost_function_given_the_command_is_the_launcher(tmp_path) -> None:
    source = (
        "import subprocess\n\n"
        "def outer():\n"
        "    def run_it(argv):\n"
        "        return subprocess.run(argv)\n"
        "    return run_it\n"
    )
    assert facts_of(tmp_path, source).launchers == ("run_it",)


@pytest.mark.parametrize(
    ("source", "blind"),
    [
        pytest.param(
            'import subprocess as sp\n\ndef build():\n    sp.run(["bash", "build.sh"])\n',
            "line 4: subprocess.run() may run repository code",
            id="through an alias",
        ),
        pytest.param(
            'import importlib\n\nsubprocess = importlib.import_module("subprocess")\n\n'
            'def build():\n    subprocess.run(["bash", "build.sh"])\n',
            "line 6: subprocess.run() may run repository code",
            id="by its owner's name alone",
        ),
    ],
)
def test_a_process_is_named_by_what_it_calls_however_it_is_reached(tmp_path, source, blind) -> None:
    assert facts_of(tmp_path, source).blind == (blind,)


@pytest.mark.parametrize(
    ("source", "launchers"),
    [
        pytest.param(
            'import subprocess\n\ndef run():\n    subprocess.run(("pytest", "tests/test_x.py"))\n',
            set(),
            id="a command tuple",
        ),
        pytest.param(
            "import subprocess\n\n"
            "def launch(argv):\n    return subprocess.run(argv)\n\n"
            'def check():\n    launch(["pytest", "tests/test_x.py"])\n',
            {"launch"},
            id="a command list given to a launcher",
        ),
    ],
)
def test_a_pytest_child_is_followed_however_its_command_is_given(
    tmp_path, source, launchers
) -> None:
    facts = facts_of(tmp_path, source)
    assert "tests.test_x" in facts.imports
    assert facts.blind_with(launchers) == ()


@pytest.mark.parametrize(
    ("bindings", "observed"),
    [
        pytest.param(['shutil.which("git")'], (), id="git alone: no repository code"),
        pytest.param(
            ['shutil.which("git")', 'shutil.which("python")'],
            ("line 5: run() of a computed program",),
            id="git or python: only a run can tell",
        ),
    ],
)
def test_a_program_found_by_which_is_known_only_when_it_is_one(
    tmp_path, bindings, observed
) -> None:
    source = (
        "import shutil\nimport subprocess\n\n"
        f"tool = {bindings[0]}\n"
        'subprocess.run([tool, "status"])\n'
        + "".join(f"tool = {binding}\n" for binding in bindings[1:])
    )
    facts = facts_of(tmp_path, source)
    assert (facts.observed, facts.blind) == (observed, ())


def test_an_empty_command_is_read_as_one_that_may_run_repository_code(tmp_path) -> None:
    """``subprocess.run([])`` names no program: the reading goes on (it once raised
    IndexError, which lost the whole module's facts) and the call stays blind."""
    source = "import subprocess\n\ndef build():\n    subprocess.run([])\n"
    assert facts_of(tmp_path, source).blind == ("line 4: subprocess.run() may run repository code",)


@pytest.mark.parametrize(("top", "sub"), [("pkg", "sub"), ("zoo", "abc")])
def test_a_star_import_of_a_nested_package_in_a_src_layout_brings_its_folder(
    tmp_path, top, sub
) -> None:
    """``from pkg.sub import *`` with ``src/pkg/sub/``: the folder is the one the index maps
    ``pkg.sub`` to, found by the package's last name (``sub``), and no sibling of it, whichever
    of the two names sorts first."""
    files = {
        f"src/{top}/__init__.py": "",
        f"src/{top}/other.py": "",
        f"src/{top}/{sub}/__init__.py": '__all__ = ["deep"]\n',
        f"src/{top}/{sub}/deep.py": "",
        "tests/test_star.py": f"from {top}.{sub} import *\n",
    }
    write_tree(tmp_path, files)
    closure = import_closure(str(tmp_path), "tests/test_star.py")
    assert closure == set(files) - {f"src/{top}/other.py"}


def test_a_module_binding_more_than_256_names_is_read(tmp_path) -> None:
    """The alias passes end when a pass adds no name, compared by value (lengths above 256 are
    distinct int objects)."""
    source = "".join(f"import m{n}\n" for n in range(300)) + "run = m0.run\nrun()\n"
    assert "m0" in facts_of(tmp_path, source).imports
