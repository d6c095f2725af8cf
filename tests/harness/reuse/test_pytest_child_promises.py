"""What ``harness/reuse/pytest_child.py`` reads from a pytest command, one promise at a time:
the child a command starts (its test modules, conftests, configuration, plug-ins), how each
argument's value is known (literals, names, parameters and their defaults, paths, ``zip``), and
where the reading stops (depth, number of alternatives). In memory: a module's source is parsed
and read as ``import_graph`` reads it."""

from __future__ import annotations

import ast
import textwrap

import pytest

from stagebot.harness.reuse import import_graph, pytest_child
from stagebot.harness.reuse.pytest_child import PytestChild, declared_options

A = ["suite.test_a", "suite.conftest", "conftest"]  # the imports ``pytest suite/test_a.py`` adds
COMPUTED_PATH = ["pytest given a computed test path"]


def child(source: str, package: tuple[str, ...] = ()) -> PytestChild | None:
    """The child the last ``subprocess.run(...)`` of ``source`` starts, as its module's reader
    (in ``package``) reads it."""
    tree = ast.parse("import subprocess\nimport sys\nfrom pathlib import Path\n" + source)
    reader = import_graph._Reader(package)
    reader.read(tree)
    call = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "run"
    ][-1]
    return pytest_child.read(reader, call.args[0], call)


def imports(source: str, package: tuple[str, ...] = ()) -> list[str]:
    read = child(source, package)
    assert read is not None and not read.blind, read
    return read.imports


def blind(source: str) -> list[str]:
    read = child(source)
    assert read is not None
    return read.blind


def code(text: str) -> str:
    return textwrap.dedent(text)


# ------------------------------------------------------------------ the child of a literal command


def test_a_test_file_brings_its_conftests_and_configuration_up_to_the_root() -> None:
    read = child('subprocess.run(["pytest", "suite/inner/test_a.py::test_x"])')
    assert read == PytestChild(
        imports=["suite.inner.test_a", "suite.inner.conftest", "suite.conftest", "conftest"],
        literals=[
            *(f"suite/inner/{name}" for name in ("test_a.py", *pytest_child._CONFIG_FILES)),
            *(f"suite/{name}" for name in pytest_child._CONFIG_FILES),
            *pytest_child._CONFIG_FILES,
        ],
    )


def test_a_test_folder_brings_every_module_under_it() -> None:
    assert imports('subprocess.run([sys.executable, "-m", "py.test", "suite"])') == [
        "suite.*",
        "suite.conftest",
        "conftest",
    ]


def test_a_path_is_read_from_the_root_and_from_the_starting_modules_folder() -> None:
    assert imports('subprocess.run(["pytest", "suite/test_a.py"])', ("tests",)) == [
        *A,
        "tests.suite.test_a",
        "tests.suite.conftest",
        "tests.conftest",
    ]


def test_a_path_above_the_root_is_read_only_from_the_starting_modules_folder() -> None:
    source = 'subprocess.run(["pytest", "../suite/test_a.py"])'
    assert imports(source, ("tests",)) == A
    for outside in ("../suite/test_a.py", ".."):
        read = child(f'subprocess.run(["pytest", "{outside}"])')
        assert read == PytestChild(), outside  # from the root: outside it, nothing to add


def test_a_path_starting_with_punctuation_is_a_test_path() -> None:
    assert imports('subprocess.run(["pytest", "(old)/test_a.py"])')[0] == "(old).test_a"


def test_a_path_from_file_is_relative_to_the_root_only() -> None:
    source = 'subprocess.run(["pytest", str(Path(__file__).resolve().parent / "test_a.py")])'
    assert imports(source, ("suite",)) == A


def test_an_absolute_path_is_outside_the_repository() -> None:
    assert blind('subprocess.run(["pytest", "/elsewhere/test_a.py"])') == [
        "pytest given /elsewhere/test_a.py, outside the repository"
    ]


@pytest.mark.parametrize(
    "command",
    [
        '["pytest", "-ppkg.plug", "-p", "pkg.other", "-pno:cacheprovider", "-p", "no:x",'
        ' "suite/test_a.py"]',
        '["python3", "-m", "pytest", "-p", "pkg.plug", "-ppkg.other", "suite/test_a.py"]',
    ],
)
def test_plugins_loaded_with_p_are_imports_and_disabled_ones_are_not(command) -> None:
    assert imports(f"subprocess.run({command})") == ["pkg.plug", "pkg.other", *A]


def test_an_options_value_is_no_test_path() -> None:
    source = 'subprocess.run(["pytest", "--tb=short", "suite/test_a.py", "-q"])'
    assert imports(source) == A


def test_a_computed_value_of_an_option_leaves_the_arguments_after_it_read() -> None:
    read = child('subprocess.run(["pytest", "--level", pick(), "-k", pick(), "suite/test_a.py"])')
    assert read == PytestChild(imports=A, literals=read.literals, options=["--level"])
    assert read.literals[0] == "suite/test_a.py"


def test_a_nested_list_is_a_computed_number_of_arguments() -> None:
    assert blind('subprocess.run(["pytest", "suite/test_a.py", ["-q"]])') == [
        "pytest given a computed number of arguments"
    ]


def test_the_arguments_after_a_computed_number_of_them_are_still_read() -> None:
    assert child('subprocess.run(["pytest", *pick(), "suite/test_a.py"])') == PytestChild(
        imports=A,
        literals=child('subprocess.run(["pytest", "suite/test_a.py"])').literals,
        blind=["pytest given a computed number of arguments"],
    )


def test_other_keywords_than_cwd_keep_the_child_followed() -> None:
    assert imports('subprocess.run(["pytest", "suite/test_a.py"], check=True, capture=1)') == A


@pytest.mark.parametrize(
    "command",
    [
        "EMPTY",
        '["java", "-m", "pytest", "suite/test_a.py"]',
        '["./tool", "-m", "pytest", "suite/test_a.py"]',
        '["python", "-m", "pip", "install", "x"]',
        '"pytest suite/test_a.py"',
    ],
)
def test_another_program_is_no_pytest_child(command) -> None:
    assert child(f"EMPTY = []\nsubprocess.run({command})") is None


# --------------------------------------------------------------------- how an argument is known


def test_strings_and_lists_joined_with_plus() -> None:
    assert imports('subprocess.run(["pytest"] + ["suite/" + "test_a.py"])') == A


def test_a_string_plus_a_list_is_not_known() -> None:
    assert blind('subprocess.run(["pytest", "suite/" + ["test_a.py"]])') == COMPUTED_PATH


def test_path_parts_are_joined_in_order() -> None:
    assert (
        imports('subprocess.run(["pytest", str(Path("suite", "inner", "..", "test_a.py"))])') == A
    )


def test_a_path_of_an_unknown_part_is_not_known() -> None:
    assert blind('subprocess.run(["pytest", Path(pick()) / "test_a.py"])') == COMPUTED_PATH


def test_the_parent_of_a_path_is_its_folder() -> None:
    assert imports('subprocess.run(["pytest", str(Path("suite/test_a.py").parent)])') == [
        "suite.*",
        "suite.conftest",
        "conftest",
    ]


@pytest.mark.parametrize(
    "value",
    [
        "Path(__file__).stem",
        "Path(__file__).name",
        "Path(__file__).resolve(strict)",
        "pick('suite/test_a.py')",
        "sorted(['suite/test_a.py'])",
        "str()",
        "str('suite/test_a.py', 'ascii')",
        "zipper(['suite/test_a.py'])",
    ],
)
def test_other_attributes_and_calls_are_not_known(value) -> None:
    assert blind(f'subprocess.run(["pytest", {value}])') == COMPUTED_PATH


def test_zip_pairs_its_lists_and_a_shorter_one_leaves_the_rest_unknown() -> None:
    source = code(
        """
        FLAGS = ["-q", "-x", "-v"]
        FILES = ["suite/test_a.py"]
        for flag, path in zip(FLAGS, FILES):
            subprocess.run(["pytest", path, flag])
        """
    )
    # each name is read on its own: 3 flags x 2 paths, three of them not known
    assert child(source) == PytestChild(A, child(source).literals, COMPUTED_PATH * 3)
    assert blind('subprocess.run(["pytest", "suite/test_a.py", *zip()])') == [
        "pytest given a computed number of arguments"
    ]


def test_an_unpacking_assignment_binds_each_name_to_its_part() -> None:
    source = code(
        """
        program, path = "pytest", "suite/test_a.py"
        subprocess.run([program, path])
        """
    )
    assert imports(source) == A
    run = "\nsubprocess.run([program, path])"
    assert child('program, path = "pytest", "suite/test_a.py", "x"' + run) is None
    assert child('program, path, extra = "pytest", "suite/test_a.py"' + run) is None


def test_a_comprehension_over_a_known_list_is_known_and_a_nested_one_is_not() -> None:
    known = 'subprocess.run(["pytest", *[p for p in ["suite/test_a.py"]]])'
    assert imports(known) == A
    nested = 'subprocess.run(["pytest", *[p for ps in [["suite/test_a.py"]] for p in ps]])'
    assert blind(nested) == [
        "pytest given a computed number of arguments",
        "pytest runs its configured test paths (none named)",
    ]


def test_a_name_bound_in_a_function_is_read_there_and_not_in_the_functions_inside() -> None:
    source = code(
        """
        path = "suite/test_b.py"

        def test_x():
            path = "suite/test_a.py"

            def inner():
                path = "elsewhere/test_c.py"

            subprocess.run(["pytest", path])
        """
    )
    assert imports(source) == A


@pytest.mark.parametrize(
    "binding",
    [
        "path += '.py'",
        "import json as path",
        "import path.sub",
        "def path(): pass",
        "class path: pass",
        "try:\n    pass\nexcept OSError as path:\n    pass",
    ],
)
def test_any_other_binding_of_the_name_makes_it_not_known(binding) -> None:
    source = f'path = "suite/test_a.py"\n{binding}\nsubprocess.run(["pytest", path])\n'
    assert blind(source) == COMPUTED_PATH


@pytest.mark.parametrize(
    "binding",
    [
        "import os.path",
        "import json as other",
        "def helper(): pass",
        "def zeta(): pass",
        "try:\n    pass\nexcept OSError as error:\n    pass\nexcept ValueError as zzz:\n    pass",
    ],
)
def test_bindings_of_other_names_leave_the_name_known(binding) -> None:
    source = f'path = "suite/test_a.py"\n{binding}\nsubprocess.run(["pytest", path])\n'
    assert imports(source) == A


# ----------------------------------------------------- a parameter: what every call of it passes

LAUNCH = code(
    """
    def launch(a, b, c="suite/test_c.py", d="suite/test_d.py", e="suite/test_e.py", *,
               mid="suite/test_m.py", alpha="suite/test_l.py", zed="suite/test_z.py"):
        subprocess.run(["pytest", c, d, e, mid, alpha, zed])
    """
)
DEFAULTS = ["c", "d", "e", "m", "l", "z"]


def ran_tests(read: PytestChild | None) -> list[str]:
    assert read is not None and not read.blind, read
    return [name.removeprefix("suite.test_") for name in read.imports if "test_" in name]


def test_a_parameter_not_passed_takes_its_default() -> None:
    assert ran_tests(child(LAUNCH + "launch(1, 2)\n")) == DEFAULTS


def test_a_parameter_passed_by_position_or_keyword_takes_that_value() -> None:
    calls = [
        'launch(1, 2, "suite/test_x.py")',
        'launch(1, 2, e="suite/test_x.py")',
        'launch(1, 2, zed="suite/test_x.py", alpha="suite/test_y.py", mid="suite/test_w.py")',
    ]
    expected = [
        ["x", *DEFAULTS[1:]],
        ["c", "d", "x", "m", "l", "z"],
        ["c", "d", "e", "w", "y", "x"],
    ]
    for call, tests in zip(calls, expected, strict=True):
        assert ran_tests(child(LAUNCH + call + "\n")) == tests, call


def test_every_call_of_the_function_gives_its_parameters_their_values() -> None:
    read = child(LAUNCH + 'launch(1, 2, "suite/test_x.py")\nlaunch(1, 2)\n')
    assert set(ran_tests(read)) == {*DEFAULTS, "x"}


def test_a_starred_call_makes_every_parameter_not_known() -> None:
    read = child(LAUNCH + "launch(*ARGS)\n")
    assert read.blind == COMPUTED_PATH * 6


def test_a_required_parameter_not_passed_is_not_known() -> None:
    source = code(
        """
        def launch(path, *, plugin):
            subprocess.run(["pytest", path, "-p", plugin])

        launch("suite/test_a.py")
        """
    )
    assert blind(source) == ["pytest -p of a computed plug-in"]


@pytest.mark.parametrize("names", [("path", "args"), ("alpha", "rest")])
def test_a_star_parameter_holds_the_rest_of_the_call(names) -> None:
    path, rest = names
    source = code(
        f"""
        def launch({path}, *{rest}):
            subprocess.run(["pytest", {path}, *{rest}])

        launch("suite/test_a.py", "-p", "pkg.plug")
        """
    )
    assert imports(source) == [*A, "pkg.plug"]


# ------------------------------------------------------------------- where the reading stops


def chain(length: int) -> str:
    """``a0 = "suite/test_a.py"; a1 = a0; ...``: a value ``length`` bindings deep."""
    names = "".join(f"a{i} = a{i - 1}\n" for i in range(1, length))
    return f'a0 = "suite/test_a.py"\n{names}subprocess.run(["pytest", a{length - 1}])\n'


def test_a_value_is_followed_through_at_most_thirty_nested_readings() -> None:
    # the command's list, the element, then one reading per binding: 29 names fill the 30
    assert imports(chain(29)) == A
    assert blind(chain(30)) == COMPUTED_PATH


def alternatives(count: int) -> str:
    paths = [f"suite/test_{i}.py" for i in range(count)]
    return f'for path in {paths}:\n    subprocess.run(["pytest", path])\n'


def test_a_command_of_at_most_64_alternatives_is_followed() -> None:
    read = child(alternatives(64))
    assert read is not None and not read.blind
    assert "suite.test_63" in read.imports
    assert blind(alternatives(65)) == COMPUTED_PATH


def test_combinations_past_64_are_not_built() -> None:
    assert len(pytest_child._products([[("a",), ("b",)]] * 6)) == 64
    assert pytest_child._products([[("a",), ("a",)]] * 7) == [None]


# ------------------------------------------------------------------------- declared options


def declared(call: str) -> tuple[str, ...]:
    node = ast.parse(call).body[0].value
    assert isinstance(node, ast.Call)
    return declared_options(node)


@pytest.mark.parametrize(
    ("call", "options"),
    [
        ('parser.addoption("--level", "-L", default="low")', ("--level", "-L")),
        ('parser.addoption("--level", default="low", action="store")', ("--level",)),
        ('parser.addoption("--fast", action="store_true")', ()),
        ('parser.addoption("--fast", default=False, action="store_true", help="h")', ()),
        ('parser.addoption("--fast", abbrev=1, action="count")', ()),
        ('parser.addoption(NAME, "--n", 5)', ("--n",)),
        ('parser.getoption("--level")', ()),
        ('parser.add_argument("--level")', ()),
        ('addoption("--level")', ()),
    ],
)
def test_an_addoption_call_declares_its_options_given_a_value(call, options) -> None:
    assert declared(call) == options


def test_a_path_that_is_the_repositorys_root_leaves_the_key_conservative() -> None:
    """``pytest .`` from the root, ``pytest ..`` from ``tests/``, or the root reached from
    ``__file__``, runs every test of the repository: no folder of the key stands for all of
    them."""
    root = ["pytest given the repository's root: every test under it"]
    assert blind('subprocess.run(["pytest", "."])') == root
    assert child('subprocess.run(["pytest", ".."])', ("tests",)).blind == root
    assert child('subprocess.run(["pytest", str(Path("x.py").parent)])').blind == root
    from_file = 'subprocess.run(["pytest", str(Path(__file__).parent{})])'
    assert child(from_file.format(".parent"), ("tests",)).blind == root
    assert child(from_file.format(' / ".."'), ("tests",)).blind == root
    assert child(from_file.format("")).blind == root


def test_a_test_file_at_the_root_brings_the_roots_conftest_and_configuration_only() -> None:
    assert child('subprocess.run(["pytest", "test_a.py"])') == PytestChild(
        imports=["test_a", "conftest"], literals=["test_a.py", *pytest_child._CONFIG_FILES]
    )
