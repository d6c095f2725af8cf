"""What ``import_graph`` reads from a module's computed imports, package resources and the
programs it starts (issue 50), through ``module_facts`` on one small file each:

- an import by a name computed from a parameter is followed through its callers (an importer):
  the parameter's position is counted without ``self``/``cls`` in a method only, through calls of
  one argument and names bound once, in the innermost function; a call giving that position no
  conftest file, a cycle of names, a name bound more than once or a ``for`` target is blind;
- ``self.path`` in a method of a pytest collector (the innermost class) is the collected file;
- a package's ``__init__`` importing ``f"{__name__}.…"`` brings in its whole folder, any other
  f-string is blind;
- a package resource call names its package (the module's own for ``__name__``), makes the
  module locate itself, and a computed package is blind with the function named;
- a started program is followed when it is an outside program (also found by
  ``shutil.which("git")``), a pytest child or an interpreter whose options, ``-c`` code,
  ``-m`` module or script are literals; anything else is blind or needs a run;
- a name's literal value, its qualified name (first binding wins, aliases in any order) and an
  environment read are told apart from other bindings, attributes and mappings."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest
from helpers.module_sources import facts_of

from stagebot.harness.reuse.import_graph import ModuleFacts, import_closure, module_facts


def blind(found: ModuleFacts) -> tuple[str, ...]:
    """What is blind in this module alone (its own launchers and importers known)."""
    return found.blind_with(set(found.launchers), set(found.importers))


def reasons(whys: tuple[str, ...]) -> list[str]:
    """The reasons without their line numbers."""
    return [why.split(": ", 1)[1] for why in whys]


# ---------------------------------------------------------------- importers


@pytest.mark.parametrize("position", range(3))
@pytest.mark.parametrize("method", [False, True], ids=["function", "method"])
def test_an_importer_is_known_by_the_position_its_callers_give_a_conftest(
    tmp_path, method, position
) -> None:
    """``self`` is not counted in a method: ``Loader().load(x, conftest)`` gives position 1 to
    ``def load(self, a, name)`` as ``load(x, conftest)`` does to ``def load(a, name)``."""
    names = [f"p{i}" for i in range(position)]
    parameters = ", ".join(["self", *names, "name"] if method else [*names, "name"])
    arguments = ", ".join([*("None" for _ in names), 'folder / "conftest.py"'])
    load = "Loader().load" if method else "load"
    define = f"def load({parameters}):\n    return importlib.import_module(name)\n"
    if method:
        define = "class Loader:\n" + textwrap.indent(define, "    ")
    source = f"import importlib\n\n{define}\n\ndef use(folder):\n    return {load}({arguments})\n"
    found = facts_of(tmp_path, source)
    assert found.importers == (("load", str(position)),)
    assert blind(found) == ()


@pytest.mark.parametrize("first", ["self", "cls"])
def test_a_functions_first_parameter_named_self_outside_a_class_is_counted(tmp_path, first) -> None:
    """A function defined outside any class (to be attached to one later) counts every
    parameter, whatever the first is called."""
    found = facts_of(
        tmp_path,
        f"""\
        import importlib

        def load({first}, name):
            return importlib.import_module(name)

        def use(folder):
            return load(None, folder / "conftest.py")
        """,
    )
    assert found.importers == (("load", "1"),)
    assert blind(found) == ()


def loader(body: str) -> str:
    """A module whose ``load(path)`` runs ``body``, called with a conftest file."""
    return (
        "import importlib\n\ndef load(path):\n"
        + textwrap.indent(body, "    ")
        + '\n\ndef use(folder):\n    return load(folder / "conftest.py")\n'
    )


FOLLOWED_NAMES = {
    "four calls of one argument": "return importlib.import_module(a(b(c(d(path)))))",
    "four names bound once": "a = path\nb = a\nc = b\nd = c\nreturn importlib.import_module(d)",
    "other local names beside it": (
        'alias = "x"\nname = path\nvalue = 2\nreturn importlib.import_module(name)'
    ),
}


@pytest.mark.parametrize("body", FOLLOWED_NAMES.values(), ids=FOLLOWED_NAMES.keys())
def test_a_name_computed_from_a_parameter_is_followed_to_it(tmp_path, body) -> None:
    found = facts_of(tmp_path, loader(body))
    assert found.importers == (("load", "0"),)
    assert blind(found) == ()


BLIND_NAMES = {
    "a cycle of names": "a = b\nb = a\nreturn importlib.import_module(a)",
    "a for target": "for name in path:\n    importlib.import_module(name)",
    "a name bound twice": "name = path\nname += '.x'\nreturn importlib.import_module(name)",
    "a call of no argument": "return importlib.import_module(make())",
}


@pytest.mark.parametrize("body", BLIND_NAMES.values(), ids=BLIND_NAMES.keys())
def test_a_name_not_bound_once_to_a_parameter_is_blind(tmp_path, body) -> None:
    found = facts_of(tmp_path, loader(body))
    assert found.importers == ()
    assert reasons(blind(found)) == ["import_module() of a computed name"]


def test_the_innermost_function_owns_the_parameter(tmp_path) -> None:
    found = facts_of(
        tmp_path,
        """\
        import importlib

        def use(folder):
            def load(path):
                return importlib.import_module(path)

            return load(folder / "conftest.py")
        """,
    )
    assert found.importers == (("load", "0"),)
    assert blind(found) == ()


@pytest.mark.parametrize("given", ['folder / "base.py"', '"__init__.py"', "folder"])
def test_an_importer_given_no_conftest_file_is_blind(tmp_path, given) -> None:
    found = facts_of(
        tmp_path,
        f"""\
        import importlib

        def load(path):
            return importlib.import_module(path)

        def use(folder):
            return load({given})
        """,
    )
    assert found.importers == (("load", "0"),)
    assert blind(found) == ("line 7: load() imports a module by a computed name",)


def collector(name: str, outer: str = "") -> str:
    """A pytest collector (inside the class ``outer`` when given) importing by ``name``."""
    own = (
        "class Own(pytest.Module):\n    def _getobj(self, session):\n"
        f"        return importlib.import_module(canonical_name({name}))\n"
    )
    if outer:
        own = f"{outer}\n" + textwrap.indent(own, "    ")
    return f"import importlib\nimport pytest\n\n{own}"


def test_self_path_in_a_pytest_collector_is_the_collected_file(tmp_path) -> None:
    assert blind(facts_of(tmp_path, collector("self.path"))) == ()
    nested = collector("self.path", "class Plugins:")  # the innermost class is the collector
    assert blind(facts_of(tmp_path, nested)) == ()


@pytest.mark.parametrize(
    "source",
    [
        collector("self.name"),
        collector("self.stem"),
        collector("session.path"),
        collector("item.path"),
        # a plain class inside a collector: its self is no collector
        "import importlib\nimport pytest\n\nclass Own(pytest.Module):\n"
        "    class Helper:\n        def _getobj(self):\n"
        "            return importlib.import_module(canonical_name(self.path))\n",
    ],
    ids=["self.name", "self.stem", "session.path", "item.path", "a class inside a collector"],
)
def test_another_path_in_a_pytest_collector_is_blind(tmp_path, source) -> None:
    assert reasons(blind(facts_of(tmp_path, source))) == ["import_module() of a computed name"]


# ---------------------------------------------------------------- a package's own modules

PLUG_INS = "import importlib, pkgutil\n\nfor found in pkgutil.iter_modules(__path__):\n"


def test_a_package_importing_a_name_under_its_own_brings_its_folder_in(tmp_path) -> None:
    for name in ('f"{__name__}.{found.name}"', 'f"{__name__}.builtin"'):
        source = PLUG_INS + f"    importlib.import_module({name})\n"
        found = facts_of(tmp_path, source, "pkg/plugins/__init__.py")
        assert "pkg.plugins.*" in found.imports
        assert found.blind == ()


@pytest.mark.parametrize(
    "name",
    [
        'f"{prefix}.{found.name}"',
        'f"{BASE}.{found.name}"',
        'f"plugins.{found.name}"',
        'f"{__name__}"',
        'f"{__name__}_{found.name}"',
    ],
)
def test_a_package_importing_another_computed_name_is_blind(tmp_path, name) -> None:
    source = PLUG_INS + f"    importlib.import_module({name})\n"
    found = facts_of(tmp_path, source, "pkg/plugins/__init__.py")
    assert not any(imported.endswith(".*") for imported in found.imports)
    assert found.blind == ("line 4: import_module() of a computed name",)


# ---------------------------------------------------------------- package resources


@pytest.mark.parametrize("package", ["", "__name__", "__package__", "__spec__.parent"])
def test_a_resource_of_the_modules_own_package_names_its_package(tmp_path, package) -> None:
    found = facts_of(
        tmp_path, f"import importlib.resources\n\nimportlib.resources.files({package})\n"
    )
    assert found.resources == ("pkg",)
    assert found.blind == ()


def test_a_resource_call_makes_the_module_locate_itself(tmp_path) -> None:
    """Even reached through ``importlib`` alone (no import names a resource module)."""
    found = facts_of(tmp_path, 'import importlib\n\nimportlib.resources.files("data")\n')
    assert found.locates_itself
    assert found.resources == ("data",)


@pytest.mark.parametrize(
    ("imports", "call", "function"),
    [
        ("import importlib.resources", "importlib.resources.read_text", "read_text"),
        ("import pkgutil", "pkgutil.get_data", "get_data"),
        ("import pkg_resources", "pkg_resources.resource_string", "resource_string"),
    ],
)
def test_a_resource_of_a_computed_package_is_blind_naming_its_function(
    tmp_path, imports, call, function
) -> None:
    found = facts_of(tmp_path, f"{imports}\n\n{call}(package_of(), 'x.txt')\n")
    assert found.blind == (f"line 3: {function}() of a computed package",)


# ---------------------------------------------------------------- programs


def started(root: Path, command: str, before: str = "") -> ModuleFacts:
    return facts_of(root, f"import shutil, subprocess, sys\n{before}\nsubprocess.run({command})\n")


RUN_BLIND = "subprocess.run() may run repository code"


@pytest.mark.parametrize(
    "command",
    [
        '"git status --short"',
        '["pytest", "tests/test_a.py"]',
        '[sys.executable, "-W"]',  # the interpreter and options only
        "[sys.executable" + ', "-O"' * 300 + "]",
        '["python3", "-c", "import pkg.core"]',
        '["/usr/bin/python3", "-c", "import pkg.core"]',
        '[sys.executable, "-X", "dev", "-c", "import pkg.core"]',
        '[sys.executable, "-O", "-c", "import pkg.core"]',
    ],
    ids=[
        "git by a command line",
        "pytest",
        "an option missing its value",
        "three hundred options",
        "python3",
        "python by its path",
        "an option with a value",
        "an option before -c",
    ],
)
def test_a_program_read_here_is_followed(tmp_path, command) -> None:
    found = started(tmp_path, command)
    assert found.blind == () and found.observed == ()
    assert found.calls[-1][2], found.calls  # the call's command is followed
    assert "pkg.core" in found.imports or "pkg.core" not in command


@pytest.mark.parametrize(
    "command",
    [
        '["./build.sh", "-v"]',
        '[sys.executable, "tools/runner"]',
        '[sys.executable, "-O", "-c"]',
        "[sys.executable" + ', "-O"' * 300 + ', "-c"]',
    ],
    ids=["a repository script", "python of no Python file", "-c of no code", "-c far in"],
)
def test_a_program_that_may_run_our_code_unread_is_blind(tmp_path, command) -> None:
    assert reasons(started(tmp_path, command).blind) == [RUN_BLIND]


@pytest.mark.parametrize(
    ("table", "arguments"),
    [
        ('("make", "python3")', '[program, "-c", "import pkg.core"]'),
        ('("a.py", "b.py")', "[sys.executable, program]"),
    ],
    ids=["program", "script"],
)
def test_a_command_word_that_may_be_one_of_several_is_blind(tmp_path, table, arguments) -> None:
    found = facts_of(
        tmp_path,
        f"import subprocess, sys\n\nTABLE = {table}\n\n"
        f"for program in TABLE:\n    subprocess.run({arguments})\n",
    )
    assert reasons(found.blind) == [RUN_BLIND]


@pytest.mark.parametrize(
    ("options", "blind_module"),
    [
        ('"-W", "ignore::DeprecationWarning", "-O", "-m", "pkg.tool", "--fast"', None),
        ('"-O", "-W", "ignore::DeprecationWarning", "-m", "pkg.tool", "--fast"', None),
        ('"-X", "dev", "-m", "pkg.py"', None),  # the module py of the package pkg
        ('"-O", "-X", "dev", "-m", "pkg.tool", "tests/test_a.py"', "pkg.tool"),
        ('"-m", "pkg.tool", "tests/test_a.py::test_f"', "pkg.tool"),
    ],
    ids=["a filter before", "a filter further in", "a module ending .py", "a file", "a test"],
)
def test_python_m_is_blind_when_given_files_after_its_module(
    tmp_path, options, blind_module
) -> None:
    found = started(tmp_path, f"[sys.executable, {options}]")
    words = ast.literal_eval(f"[{options}]")
    assert words[words.index("-m") + 1] in found.imports
    expected = [f"python -m {blind_module} runs repository files it is given"]
    assert reasons(found.blind) == (expected if blind_module else [])


def test_python_m_of_one_of_several_modules_names_the_first(tmp_path) -> None:
    found = facts_of(
        tmp_path,
        "import subprocess, sys\n\n"
        'RUNNERS = ("unittest", "pkg.tool")\n\n'
        "for runner in RUNNERS:\n"
        '    subprocess.run([sys.executable, "-m", runner])\n',
    )
    assert reasons(found.blind) == ["python -m unittest runs repository files it is given"]
    assert {"unittest", "pkg.tool"} <= set(found.imports)


def test_every_python_c_code_that_parses_is_read(tmp_path) -> None:
    """One code of a table that does not parse is blind; the codes after it are still read."""
    source = (
        "import subprocess, sys\n\n"
        'CODES = ("import pkg.first", "import (", "import pkg.last")\n\n'
        "for code in CODES:\n"
        '    subprocess.run([sys.executable, "-c", code])\n'
    )
    for name in ("first", "last"):
        facts_of(tmp_path, "", f"pkg/{name}.py")
    facts_of(tmp_path, source, "tests/test_codes.py")
    assert import_closure(str(tmp_path), "tests/test_codes.py") == {
        "tests/test_codes.py",
        "pkg/first.py",
        "pkg/last.py",
    }
    assert reasons(module_facts(str(tmp_path), "tests/test_codes.py").blind) == [
        "python -c of code that does not parse"
    ]


def test_a_launcher_is_the_innermost_function_given_the_command(tmp_path) -> None:
    found = facts_of(
        tmp_path,
        """\
        import subprocess

        def outer():
            def launch(command):
                return subprocess.run(command)

            return launch
        """,
    )
    assert found.launchers == ("launch",)
    assert found.blind == ()


@pytest.mark.parametrize(
    "program",
    [
        'shutil.which("git")',
        'shutil.which("git", os.X_OK)',
    ],
)
def test_an_outside_program_found_by_shutil_which_is_followed(tmp_path, program) -> None:
    found = started(tmp_path, '[git, "status"]', f"import os\ngit = {program}\n")
    assert found.blind == () and found.observed == ()


@pytest.mark.parametrize(
    "program", ['locate("git")', "shutil.which(tool)"], ids=["another function", "computed"]
)
def test_a_program_found_otherwise_needs_a_run(tmp_path, program) -> None:
    found = started(tmp_path, '[git, "status"]', f"tool = input()\ngit = {program}\n")
    assert found.observed == ("line 5: run() of a computed program",)
    assert found.blind == ()


# ---------------------------------------------------------------- names


def test_a_name_an_import_binds_is_no_literal(tmp_path) -> None:
    """``import plugins.base`` binds ``plugins``: assigning it a literal elsewhere leaves it
    computed."""
    found = facts_of(
        tmp_path,
        """\
        import importlib
        import plugins.base

        def load():
            plugins = "fallback"
            return importlib.import_module(plugins)
        """,
    )
    assert "fallback" not in found.imports
    assert reasons(found.blind) == ["import_module() of a computed name"]


@pytest.mark.parametrize("depth", [1, 3, 8])
def test_aliases_of_aliases_assigned_in_reverse_order_are_followed(tmp_path, depth) -> None:
    """However deep the chain (it once stopped after three), the call is the process call."""
    chain = "".join(f"        a{n} = a{n + 1}\n" for n in range(depth))
    found = facts_of(
        tmp_path,
        f"""\
        import subprocess

        def main():
            a0(["make"])

{chain}        a{depth} = subprocess.run
        """,
    )
    assert reasons(found.blind) == ["subprocess.run() may run repository code"]


def test_the_first_binding_of_a_name_to_a_function_counts(tmp_path) -> None:
    found = facts_of(
        tmp_path,
        """\
        import shutil, subprocess

        launch = subprocess.run
        launch = shutil.which
        launch(["make"])
        """,
    )
    assert reasons(found.blind) == ["subprocess.run() may run repository code"]


def test_another_mapping_attribute_is_no_environment(tmp_path) -> None:
    found = facts_of(
        tmp_path,
        """\
        import os

        def mode(settings):
            if "PKG_A" in settings.data:
                return settings.cache["PKG_B"] or settings.data.get("PKG_C")
            return os.environ.get("PKG_MODE")
        """,
    )
    assert found.environment == ("PKG_MODE",)


def test_an_alias_of_a_builtin_in_a_module_without_imports_is_followed(tmp_path) -> None:
    """``load = __import__`` binds no import name, yet ``load(...)`` is ``__import__``."""
    found = facts_of(tmp_path, 'load = __import__\n\nload("pkg.plugin")\n')
    assert "pkg.plugin" in found.imports
