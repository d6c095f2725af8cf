"""A repository's own Python files and what each one statically depends on, read with ``ast``.

Shared by the failure analysis (which changed files a test imports: ``import_closure``) and the
dependency key of reuse by inputs (``module_facts``: the imports, the string literals that may
name data files, and what the file does that no static reading can follow).

Not ``grimp``: it builds a graph of one installed, importable top-level package, while a test file
is usually no package member and the code under test may not be installed. Not ``modulefinder``:
it follows every import (the standard library, torch) on the current ``sys.path``, slowly, and
needs the test run's path. ``ast`` reads each file once, never runs code (importing a GPU test
would initialise CUDA), and also reads a file that fails to import. A module name resolves to the
repository file whose dotted path ends with it (``mathlib`` -> ``src/mathlib.py``; nearest to the
root on a tie), so src layouts and package-dir mappings work without knowing ``sys.path``.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath

from stagebot.harness.reuse import pytest_child

# Caches and environments, never an input wherever they are; and the outputs a build or stagebot
# writes at the root (stagebot's own go to out/). Only at the root: a test folder may well be
# called tests/dist or tests/build, and skipping it would leave its tests' files out of their keys.
SKIP_DIRS = {
    ".git",
    "node_modules",
    "__pycache__",
    ".venv",
    ".pytest_cache",
    ".ruff_cache",
    ".mypy_cache",
    ".hypothesis",
    ".tox",
}
SKIP_ROOT_DIRS = {"out", "build", "dist", "venv"}

# Every callable of the families below is matched by its qualified name, however the module
# reaches it: ``subprocess.run``, ``from subprocess import run``, ``import subprocess as sp;
# sp.run``, ``runner = subprocess.run; runner(...)`` all read as ``subprocess.run``.
SUBMODULES = ".*"  # an import name's suffix: every module under that folder
_TEST_RUNNERS = {"pytest", "py.test", "unittest"}  # ``python -m`` modules that run our tests
_COLLECTED = "collected"  # a module name computed from the file pytest collects (``self.path``)
# Calls whose first argument names a module to import: followed when it is a literal, blind
# otherwise.
_IMPORT_FUNCTIONS = {
    "importlib.import_module": "import_module",
    "builtins.__import__": "__import__",
    "importlib.__import__": "__import__",
    "runpy.run_module": "run_module",
    "runpy.run_path": "run_path",
    "importlib.util.spec_from_file_location": "spec_from_file_location",
    "importlib.machinery.SourceFileLoader": "SourceFileLoader",
    "imp.load_source": "load_source",
    "pkgutil.resolve_name": "resolve_name",
}
# The same by their bare attribute name, when what owns them cannot be told (``self.loader``).
_IMPORT_CALLS = {"import_module", "__import__", "run_module", "run_path", "spec_from_file_location"}
# pytest's collectors: ``self.path`` in a method of a subclass is the file pytest collects.
_PYTEST_COLLECTORS = {
    "pytest.Module",
    "pytest.File",
    "pytest.Package",
    "_pytest.python.Module",
    "_pytest.python.Package",
    "_pytest.nodes.File",
}
# Calls that start another program: it may run repository code that no import shows.
_PROCESS_FUNCTIONS = {
    "subprocess.run",
    "subprocess.Popen",
    "subprocess.call",
    "subprocess.check_call",
    "subprocess.check_output",
    "subprocess.getoutput",
    "subprocess.getstatusoutput",
    "os.system",
    "os.popen",
    "pty.spawn",
    "asyncio.create_subprocess_exec",
    "asyncio.create_subprocess_shell",
}
_PROCESS_PREFIXES = ("os.exec", "os.spawn", "os.posix_spawn")
# Programs that are not the repository's: starting them is not blind (never an interpreter,
# pytest, `bot` or a shell, which may run repository code).
_OUTSIDE_PROGRAMS = {"git", "nvidia-smi", "nvcc", "ptxas", "chromium", "chromium-browser", "which"}
# Interpreter options that take the next argument as their value (``-X dev``, ``-W error``).
_PYTHON_OPTION_VALUES = {"-X", "-W", "-Q"}
# Modules that open files relative to a package (importlib.resources, pkgutil.get_data).
_RESOURCE_MODULES = ("importlib.resources", "importlib_resources", "pkgutil", "pkg_resources")
# Their calls whose first argument names the package whose folder holds the resource.
_RESOURCE_FUNCTIONS = {
    *(
        f"{module}.{name}"
        for module in ("importlib.resources", "importlib_resources")
        for name in (
            "files",
            "read_text",
            "read_binary",
            "open_text",
            "open_binary",
            "path",
            "contents",
            "is_resource",
        )
    ),
    "pkgutil.get_data",
    *(
        f"pkg_resources.{name}"
        for name in (
            "resource_string",
            "resource_stream",
            "resource_filename",
            "resource_listdir",
            "resource_exists",
            "resource_isdir",
        )
    ),
}
# Names that, as a resource call's package argument, mean the calling module's own package.
_OWN_PACKAGE = {"__name__", "__package__", "__spec__.parent", "__spec__.name"}
# Loading a native library: ``ctypes.CDLL(...)``, ``ctypes.cdll.LoadLibrary``, ``ffi.dlopen``.
_NATIVE_PREFIXES = (
    "ctypes.CDLL",
    "ctypes.PyDLL",
    "ctypes.cdll",
    "ctypes.pydll",
    "ctypes.util",
    "numpy.ctypeslib.load_library",
)
_NATIVE_ATTRIBUTES = {"dlopen", "LoadLibrary"}
# The environment: reading calls and the mapping itself (its writes are not reads).
_ENVIRONMENT_READS = {"os.getenv", "os.getenvb", "os.environ.get", "os.environ.pop"}
_ENVIRONMENT_MAPPINGS = {"os.environ", "os.environb"}
_BUILTINS = {"__import__": "builtins.__import__"}
_EXTENSION_SUFFIXES = (".so", ".pyd")  # extension modules, indexed by their module name


@dataclass(frozen=True)
class ModuleFacts:
    """What one Python file depends on, as far as its source shows."""

    imports: tuple[str, ...]  # dotted names, relative imports made absolute
    literals: tuple[str, ...]  # string constants that may name files or folders
    environment: tuple[str, ...]  # environment variables read by a literal name
    blind: tuple[str, ...]  # "line N: what" — dependencies no static reading can follow
    launchers: tuple[str, ...] = ()  # functions that start the program their caller names
    # (callee, line, its command is followed, the argument positions that name a conftest file)
    calls: tuple[tuple[str, int, bool, tuple[str, ...]], ...] = ()
    locates_itself: bool = False  # reads __file__ or package resources: may open files beside it
    resources: tuple[str, ...] = ()  # packages (dotted) whose folders it reads resources from
    loads_native: bool = False  # loads a native library by ctypes / cffi
    observed: tuple[str, ...] = ()  # "line N: what" — only a run can tell (an observed key)
    scripts: tuple[str, ...] = ()  # Python files it runs as ``python FILE`` (literal paths)
    # (function, argument position): functions that import the module of the path they are given
    importers: tuple[tuple[str, str], ...] = ()
    options: tuple[str, ...] = ()  # pytest options it declares with a value (``addoption``)
    # ("line N: what", option): a pytest child given a computed value of that option; followed
    # when a module of the key declares it (``pytest_child``)
    computed_options: tuple[tuple[str, str], ...] = ()

    def blind_with(
        self, launchers: set[str], importers: set[tuple[str, str]] = frozenset()
    ) -> tuple[str, ...]:
        """``blind``, plus the calls of those launchers (of any module) that may run our code and
        of those importers (of any module) that are given no conftest file to import."""
        return (
            self.blind
            + tuple(
                f"line {line}: {name}() may run repository code"
                for name, line, outside, _ in self.calls
                if name in launchers and not outside
            )
            + tuple(
                f"line {line}: {name}() imports a module by a computed name"
                for name, line, _, conftests in self.calls
                for importer, position in importers
                if name == importer and position not in conftests
            )
        )


@lru_cache(maxsize=8)
def module_index(root: str) -> Mapping[str, tuple[str, ...]]:
    """``build_index`` of the repository's files, read once per root (a report's one checkout)."""
    return build_index(repository_files(root))


def build_index(files: Iterable[str]) -> Mapping[str, tuple[str, ...]]:
    """Dotted name (every suffix of a file's dotted path) -> repository files, nearest first;
    an extension module by its module name (the part of its file name before the first dot)."""
    index: dict[str, list[str]] = {}
    for relative in files:
        if relative.endswith(".py"):
            parts = relative[:-3].split("/")
        elif relative.endswith(_EXTENSION_SUFFIXES):  # pkg/_speed.cpython-311-x86_64-linux-gnu.so
            parts = relative.split("/")
            parts[-1] = parts[-1].split(".")[0]
        else:
            continue
        if parts[-1] == "__init__":
            parts.pop()
        for start in range(len(parts)):
            index.setdefault(".".join(parts[start:]), []).append(relative)
    return {name: tuple(sorted(paths, key=lambda p: p.count("/"))) for name, paths in index.items()}


def repository_files(root: str) -> tuple[str, ...]:
    """Every file under ``root`` (relative, '/'-separated, sorted), outputs and caches left out."""
    found = []
    for folder, dirs, files in os.walk(root):
        skip = SKIP_DIRS | SKIP_ROOT_DIRS if folder == root else SKIP_DIRS
        dirs[:] = sorted(d for d in dirs if d not in skip and not d.endswith(".egg-info"))
        for name in files:
            if name != ".git" and not name.endswith((".pyc", ".pyo")):
                path = os.path.relpath(os.path.join(folder, name), root)
                found.append(path.replace(os.sep, "/"))
    return tuple(sorted(found))


def resolve(index: Mapping[str, tuple[str, ...]], name: str) -> list[str]:
    """The files ``import name`` runs: the module and its parent packages (nearest match)."""
    if name.endswith(SUBMODULES):  # every module under a package's folder
        package = name.removesuffix(SUBMODULES)
        last = package.rsplit(".", 1)[-1]
        folders = (
            {package.replace(".", "/") + "/"}
            | {
                path.removesuffix("__init__.py")  # where the index maps it (a src/ layout)
                for path in resolve(index, package)
                if path.rsplit("/", 2)[-2:] == [last, "__init__.py"]
            }
        )
        return sorted(
            {p for paths in index.values() for p in paths if p.startswith(tuple(folders))}
        )
    found = []
    parts = name.split(".")
    for end in range(1, len(parts) + 1):
        dotted = ".".join(parts[:end])
        candidates = index.get(dotted) or (index.get(".".join(parts[1:end])) if end > 1 else None)
        if candidates:
            depth = candidates[0].count("/")
            found += [path for path in candidates if path.count("/") == depth]
    return found


def module_facts(root: str, path: str) -> ModuleFacts:
    if not path.endswith(".py"):  # an extension module: compiled, it names nothing we can read
        return ModuleFacts((), (), (), ())
    try:
        source = Path(root, path).read_text(errors="replace")
    except OSError as error:
        return ModuleFacts((), (), (), (f"unreadable: {type(error).__name__}",))
    return _facts(path, source)


@lru_cache(maxsize=4096)
def _facts(path: str, source: str) -> ModuleFacts:
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError) as error:
        return ModuleFacts((), (), (), (f"unparsable: {type(error).__name__}",))
    posix = PurePosixPath(path)
    return _Reader(posix.parent.parts, posix.name == "__init__.py").read(tree)


class _Reader(ast.NodeVisitor):
    """One pass over a module. A name is read as its literal values when every binding of it in
    the module assigns a literal or a table of literals (``ENV = "X"``, ``code = "import x"``), or
    when it is a ``for`` target over such a table (``for name in MODULES``, ``for key, name in
    TABLE.items()``): the only computed names followed."""

    def __init__(self, package: tuple[str, ...], is_package: bool = False):
        self.package = package
        self.is_package = is_package  # an __init__.py: ``__name__`` names its folder
        self.constants: dict[str, tuple[str, ...]] = {}  # names that can only be these literals
        self.bound: list[dict[str, tuple[str, ...]]] = []  # loop targets over those, innermost last
        self.programs: dict[str, str] = {}  # names that can only be shutil.which("program")
        self.names: dict[str, str] = {}  # local name -> the qualified name it stands for
        self.parameters: list[tuple[str, set[str]]] = []  # enclosing functions and their parameters
        self.functions: list[ast.FunctionDef | ast.AsyncFunctionDef] = []  # the enclosing ones
        self.collectors: list[bool] = []  # enclosing classes: is it a pytest collector
        # (function, parameter position, import function, its call)
        self.importing: list[tuple[str, str, str, ast.Call]] = []
        self.importers: list[tuple[str, str]] = []  # those whose calls can all be checked
        self.referenced: dict[str, int] = {}  # function name -> times named other than called
        self.called: dict[str, int] = {}  # function name -> times called
        self.launchers: list[str] = []
        self.calls: list[tuple[str, int, bool]] = []
        self.locates_itself = False
        self.imports: list[str] = []
        self.literals: list[str] = []
        self.environment: list[str] = []
        self.blind: list[str] = []
        self.observed: list[str] = []
        self.resources: list[str] = []
        self.scripts: list[str] = []
        self.loads_native = False
        self.options: list[str] = []
        self.computed_options: list[tuple[str, str]] = []
        self.tree = ast.Module([], [])

    def read(self, tree: ast.Module) -> ModuleFacts:
        self.tree = tree
        self.constants = _literal_names(tree, _literal_strings)
        self.programs = {
            name: values[0]
            for name, values in _literal_names(tree, _which_program).items()
            if len(values) == 1
        }
        self.names = _qualified_names(tree, self.package)
        self.visit(tree)
        for function, position, called, call in self.importing:
            # passed on as a value, or called from nowhere here: its calls cannot be checked
            if self.referenced.get(function) or not self.called.get(function):
                self._blind(call, f"{called}() of a computed name")
            else:
                self.importers.append((function, position))
        return ModuleFacts(
            tuple(name for name in self.imports if name),
            tuple(dict.fromkeys(self.literals)),
            tuple(sorted(set(self.environment))),
            tuple(self.blind),
            tuple(dict.fromkeys(self.launchers)),
            tuple(self.calls),
            self.locates_itself or any(name.startswith(_RESOURCE_MODULES) for name in self.imports),
            tuple(dict.fromkeys(self.resources)),
            self.loads_native,
            tuple(self.observed),
            tuple(self.scripts),
            tuple(dict.fromkeys(self.importers)),
            tuple(dict.fromkeys(self.options)),
            tuple(dict.fromkeys(self.computed_options)),
        )

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        arguments = node.args
        names = [a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)]
        self.parameters.append((node.name, set(names)))
        self.functions.append(node)
        self.generic_visit(node)
        self.functions.pop()
        self.parameters.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.collectors.append(any(self._qualified(b) in _PYTEST_COLLECTORS for b in node.bases))
        self.generic_visit(node)
        self.collectors.pop()

    def visit_Name(self, node: ast.Name) -> None:
        self.locates_itself |= node.id in ("__file__", "__spec__", "__path__")
        if isinstance(node.ctx, ast.Load):
            self.referenced[node.id] = self.referenced.get(node.id, 0) + 1

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.ctx, ast.Load):
            self.referenced[node.attr] = self.referenced.get(node.attr, 0) + 1
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.imports += [alias.name for alias in node.names]

    def visit_Assign(self, node: ast.Assign) -> None:
        """``pytest_plugins = ["pkg.fixtures"]``: pytest imports those modules by name."""
        if any(isinstance(t, ast.Name) and t.id == "pytest_plugins" for t in node.targets):
            empty = isinstance(node.value, ast.List | ast.Tuple) and not node.value.elts
            names = () if empty else _literal_strings(node.value)
            if names is None:
                self._blind(node, "pytest_plugins of a computed value")
            else:
                self.imports += names
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = _from_module(node, self.package)
        self.imports.append(module)
        # ``from pkg import *`` also runs the submodules ``pkg.__all__`` names: ``pkg.*`` reads
        # as all of them (SUBMODULES)
        self.imports += [f"{module}.{alias.name}" for alias in node.names]

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and 0 < len(node.value) < 256 and "\n" not in node.value:
            self.literals.append(node.value)

    def visit_For(self, node: ast.For) -> None:
        table = node.iter
        if isinstance(table, ast.Call) and isinstance(table.func, ast.Attribute):
            table = table.func.value if table.func.attr in ("items", "keys", "values") else table
        strings = self.constants.get(table.id) if isinstance(table, ast.Name) else None
        names = [n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)]
        self.bound.append({name: strings for name in names} if strings is not None else {})
        self.generic_visit(node)
        self.bound.pop()

    def visit_Call(self, node: ast.Call) -> None:
        owner, name = _callee(node.func)
        qualified = self._qualified(node.func) or ""
        first = node.args[0] if node.args else None
        process = _is_process(qualified) or (not qualified and _is_process(f"{owner}.{name}"))
        followed = (
            self._outside_program(first)
            or (process or isinstance(first, ast.List))
            and self._pytest_child(first, node)
            or self._python_child(first, node)
        )
        self.options += pytest_child.declared_options(node)
        if qualified in _IMPORT_FUNCTIONS or (
            not qualified and name in _IMPORT_CALLS and owner is not None
        ):
            self._import_call(_IMPORT_FUNCTIONS.get(qualified, name), first, node)
        elif process:
            if self._is_parameter(first):
                self.launchers.append(self.parameters[-1][0])
            elif not followed and self._computed_program(first):
                self.observed.append(f"line {node.lineno}: {name}() of a computed program")
            elif not followed:
                self._blind(node, f"{qualified or f'{owner}.{name}'}() may run repository code")
        elif qualified in _ENVIRONMENT_READS or (
            name in ("get", "pop") and self._is_environ(node.func.value)  # type: ignore[attr-defined]
        ):
            self._environment_name(first, node)
        elif qualified in _RESOURCE_FUNCTIONS:
            self._resource_call(qualified, first, node)
        elif qualified.startswith(_NATIVE_PREFIXES) or name in _NATIVE_ATTRIBUTES:
            self.loads_native = True
        self.calls.append((name, node.lineno, followed, self._conftest_arguments(node)))
        self.generic_visit(node)
        self.referenced[name] = self.referenced.get(name, 0) - 1  # named by this call
        self.called[name] = self.called.get(name, 0) + 1

    def _qualified(self, node: ast.AST) -> str | None:
        """The qualified name an expression stands for through the module's imports and
        aliases (``sp.run`` -> ``subprocess.run``), None when it is not one."""
        return _dotted(node, self.names)

    def _is_environ(self, node: ast.AST) -> bool:
        return self._qualified(node) in _ENVIRONMENT_MAPPINGS or _is_environ(node)

    def _import_call(self, name: str, first: ast.expr | None, node: ast.Call) -> None:
        modules = self._strings(first)
        if modules is None and self._own_submodule(first):
            self.imports.append(".".join(self.package) + SUBMODULES)
        elif modules is None:
            source = self._path_source(first)
            function = self.functions[-1] if self.functions else None
            hidden = function is None or function.decorator_list or _called_by_pytest(function)
            by_name = name in ("import_module", "__import__")
            if source is None or not by_name or (source != _COLLECTED and hidden):
                self._blind(node, f"{name}() of a computed name")
            elif source != _COLLECTED:  # a parameter: its callers must give a conftest file
                self.importing.append((function.name, source, name, node))  # type: ignore[union-attr]
        elif name in ("import_module", "__import__", "run_module", "resolve_name"):
            self.imports += [module.split(":")[0] for module in modules]
        else:
            self._blind(node, f"{name}() runs a file by path")

    def _path_source(self, node: ast.AST | None, depth: int = 0) -> str | None:
        """Where a computed module name comes from, when it is computed from a path alone (the
        expression itself, or a call of one argument on it, ``canonical_name(path)``, or a
        local name bound once to that): ``_COLLECTED`` for ``self.path`` in a method of a pytest
        collector (the file pytest collects), the position of the enclosing function's
        parameter it comes from (the function then imports what its callers name), else None."""
        function = self.functions[-1] if self.functions else None
        if function is None or depth > 4:
            return None
        parameters = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
        method = bool(self.collectors) and parameters[:1] in (["self"], ["cls"])
        if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
            return self._path_source(node.args[0], depth + 1)
        if isinstance(node, ast.Attribute) and node.attr == "path":
            collected = method and self.collectors[-1] and isinstance(node.value, ast.Name)
            return _COLLECTED if collected and node.value.id == "self" else None  # type: ignore[attr-defined]
        if not isinstance(node, ast.Name):
            return None
        if node.id in parameters:
            return str(parameters.index(node.id) - method)
        bindings = [
            n.value
            for n in ast.walk(function)
            if isinstance(n, ast.Assign) and any(_binds(t, node.id) for t in n.targets)
        ]
        stores = [n for n in ast.walk(function) if _binds(n, node.id)]
        if len(bindings) == 1 and len(stores) == 1:
            return self._path_source(bindings[0], depth + 1)
        return None

    def _conftest_arguments(self, node: ast.Call) -> tuple[str, ...]:
        """The positions (and keywords) of a call's arguments that name a conftest file:
        ``folder / "conftest.py"`` or a literal path ending in ``conftest.py``."""
        arguments = [(str(i), a) for i, a in enumerate(node.args)]
        arguments += [(k.arg, k.value) for k in node.keywords if k.arg]
        return tuple(position for position, value in arguments if _names_conftest(value))

    def _resource_call(self, qualified: str, first: ast.expr | None, node: ast.Call) -> None:
        """A package resource: every file under the named package's folder is in the key."""
        self.locates_itself = True
        if first is None or self._is_own_package(first):
            self.resources.append(".".join(self.package))
            return
        packages = self._strings(first) or _tuple(self._qualified(first))
        if packages is None:
            self._blind(node, f"{qualified.rsplit('.', 1)[-1]}() of a computed package")
        else:
            self.resources += packages

    def _is_own_package(self, node: ast.expr) -> bool:
        text = ast.unparse(node)
        return text in _OWN_PACKAGE

    def _computed_program(self, command: ast.expr | None) -> bool:
        """A command whose program is computed (a name, an attribute, a call), not the
        interpreter, not a literal: what it runs only a run can tell (the observed key)."""
        listed = isinstance(command, ast.List | ast.Tuple) and command.elts
        program = command.elts[0] if listed else None
        if program is None or isinstance(program, ast.Constant | ast.Starred):
            return False
        if self._qualified(program) == "sys.executable" or self._strings(program) is not None:
            return False
        return not (isinstance(program, ast.Name) and program.id in self.programs)

    def _own_submodule(self, node: ast.expr | None) -> bool:
        """``f"{__name__}.{…}"`` in a package's ``__init__.py`` (plug-ins found with
        ``pkgutil.iter_modules(__path__)``): some module of its own folder, so every module
        under that folder counts (over-inclusion is safe)."""
        if not self.is_package or not isinstance(node, ast.JoinedStr) or len(node.values) < 2:
            return False
        head, dot = node.values[0], node.values[1]
        return (
            isinstance(head, ast.FormattedValue)
            and isinstance(head.value, ast.Name)
            and head.value.id == "__name__"
            and isinstance(dot, ast.Constant)
            and str(dot.value).startswith(".")
        )

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Load) and self._is_environ(node.value):
            self._environment_name(node.slice, node)
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        if any(self._is_environ(c) for c in node.comparators):
            self._environment_name(node.left, node)
        self.generic_visit(node)

    def _strings(self, node: ast.AST | None) -> tuple[str, ...] | None:
        """The string(s) an expression can be: a literal, a constant, a loop target over a table."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return (node.value,)
        if isinstance(node, ast.Name):
            for scope in reversed(self.bound):
                if node.id in scope:
                    return scope[node.id]
            return self.constants.get(node.id)
        return None

    def _is_parameter(self, node: ast.AST | None) -> bool:
        return (
            bool(self.parameters)
            and isinstance(node, ast.Name)
            and (node.id in self.parameters[-1][1])
        )

    def _outside_program(self, first: ast.AST | None) -> bool:
        """A literal command line whose program is not an interpreter or a repository file."""
        if isinstance(first, ast.List | ast.Tuple) and first.elts:
            program = first.elts[0]
        else:
            program = first
        if isinstance(program, ast.Name) and program.id in self.programs:
            word = self.programs[program.id]
        elif isinstance(program, ast.Constant) and isinstance(program.value, str):
            word = (program.value.split() or [""])[0]
        else:
            return False
        return word in _OUTSIDE_PROGRAMS

    def _pytest_child(self, command: ast.expr | None, at: ast.Call) -> bool:
        """A pytest child (``pytest_child``): its test files, conftests and plug-ins join this
        module's imports, its paths and configuration its literals."""
        child = pytest_child.read(self, command, at)
        if child is None:
            return False
        self.imports += child.imports
        self.literals += child.literals
        for what in child.blind:
            self._blind(at, what)
        self.computed_options += [
            (f"line {at.lineno}: pytest {option} given a computed value", option)
            for option in child.options
        ]
        return True

    def _python_child(self, command: ast.AST | None, at: ast.AST) -> bool:
        """``[python, OPTIONS..., "-c", CODE]``, ``[python, ..., "-m", MODULE]`` or ``[python,
        ..., "script.py", ...]`` with literal CODE / MODULE / script: the child runs that code,
        read here as part of this module (a script as an import of its file). The interpreter
        with options only (``python -V``) runs no repository code. False for any other command."""
        if not isinstance(command, ast.List | ast.Tuple) or len(command.elts) < 2:
            return False
        program, *arguments = command.elts
        interpreter = self._qualified(program) == "sys.executable" or (
            (self._strings(program) or ("",))[0].rsplit("/", 1)[-1].startswith("python")
        )
        if not interpreter:
            return False
        flags = [self._strings(argument) for argument in arguments]
        position = 0
        while position < len(flags):
            flag = flags[position]
            if flag is None or len(flag) != 1:
                return False
            word = flag[0]
            if word in ("-c", "-m"):
                break
            if not word.startswith("-"):  # a script: followed when it is a Python file
                if not word.endswith(".py"):
                    return False
                self.scripts.append(word)
                self.imports.append(word.removesuffix(".py").replace("/", "."))
                return True
            position += 2 if word in _PYTHON_OPTION_VALUES else 1
        else:
            return True  # the interpreter and its options only
        values = flags[position + 1] if position + 1 < len(flags) else None
        if values is None:
            return False
        if word == "-m":
            rest = [flag for flag in flags[position + 2 :] if flag is not None]
            named = [w for flag in rest for w in flag if w.endswith(".py") or "::" in w]
            if set(values) & _TEST_RUNNERS or named:  # runs the tests or files it is given
                self._blind(at, f"python -m {values[0]} runs repository files it is given")
            self.imports += values
            return True
        for source in values:
            try:
                child = _Reader(self.package).read(ast.parse(source))
            except SyntaxError:
                self._blind(at, "python -c of code that does not parse")
                continue
            self.imports += child.imports
            self.literals += child.literals
            self.environment += child.environment
            self.resources += child.resources
            self.scripts += child.scripts
            self.loads_native |= child.loads_native
            # the audit hook sees this process only: what the child alone can tell is blind
            self.blind += [
                f"{what} (in the python -c code)" for what in (*child.blind, *child.observed)
            ]
        return True

    def _environment_name(self, node: ast.AST | None, at: ast.AST) -> None:
        names = self._strings(node)
        if names is None:
            self._blind(at, "an environment variable read by a computed name")
        else:
            self.environment += names

    def _blind(self, node: ast.AST, what: str) -> None:
        self.blind.append(f"line {getattr(node, 'lineno', '?')}: {what}")


def _binds(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store)


def _called_by_pytest(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A hook or a test: pytest calls it with arguments no static reading sees."""
    return function.name.startswith(("pytest_", "test"))


def _names_conftest(node: ast.AST) -> bool:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        node = node.right
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and PurePosixPath(node.value).name == "conftest.py"
    )


def _literal_names(
    tree: ast.Module, literal: Callable[[ast.AST], tuple[str, ...] | None]
) -> dict[str, tuple[str, ...]]:
    """Name -> its values, for the names whose every binding in the module assigns a value that
    ``literal`` reads (a parameter, an import, a def, a ``for`` or ``with`` target, an augmented
    assignment or an ``except ... as`` of that name anywhere disqualifies it)."""
    literal_targets: dict[int, tuple[str, ...]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            strings = literal(node.value)
            for target in getattr(node, "targets", None) or [node.target]:
                if isinstance(target, ast.Name) and strings is not None:
                    literal_targets[id(target)] = strings
    values: dict[str, list[str]] = {}
    other: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            if id(node) in literal_targets:
                values.setdefault(node.id, []).extend(literal_targets[id(node)])
            else:
                other.add(node.id)
        elif isinstance(node, ast.arg):
            other.add(node.arg)
        elif isinstance(node, ast.alias):
            other.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            other.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            other.add(node.name)
    return {
        name: tuple(dict.fromkeys(found)) for name, found in values.items() if name not in other
    }


def _qualified_names(tree: ast.Module, package: tuple[str, ...]) -> dict[str, str]:
    """Local name -> the qualified name it is bound to by an import (``import subprocess as
    sp``, ``from os import getenv``, a relative import made absolute) or by an assignment of
    such a name (``run = subprocess.run``, ``env = os.environ``); any binding counts, so a name
    bound to a followed function anywhere is read as that function everywhere."""
    names: dict[str, str] = {}
    assignments: list[tuple[str, ast.expr]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom):
            module = _from_module(node, package)
            for alias in node.names:
                if alias.name != "*":
                    names[alias.asname or alias.name] = f"{module}.{alias.name}"
        elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            for target in getattr(node, "targets", None) or [node.target]:
                if isinstance(target, ast.Name):
                    assignments.append((target.id, node.value))
    known = -1
    while known < len(names):  # aliases of aliases, in any order: until none is added
        known = len(names)
        for name, value in assignments:
            qualified = _dotted(value, names)
            if qualified is not None and name not in names:
                names[name] = qualified
    return names


def _from_module(node: ast.ImportFrom, package: tuple[str, ...]) -> str:
    """The module a ``from ... import`` names, a relative one made absolute."""
    if not node.level:
        return node.module or ""
    anchor = package[: len(package) - (node.level - 1)] if node.level > 1 else package
    return ".".join([*anchor, *([node.module] if node.module else [])])


def _dotted(node: ast.AST, names: Mapping[str, str]) -> str | None:
    if isinstance(node, ast.Name):
        return names.get(node.id, _BUILTINS.get(node.id))
    if isinstance(node, ast.Attribute):
        owner = _dotted(node.value, names)
        return f"{owner}.{node.attr}" if owner else None
    return None


def _is_process(qualified: str) -> bool:
    return qualified in _PROCESS_FUNCTIONS or qualified.startswith(_PROCESS_PREFIXES)


def _tuple(value: str | None) -> tuple[str, ...] | None:
    return (value,) if value else None


def _which_program(value: ast.AST) -> tuple[str, ...] | None:
    """``shutil.which("program")``: the program, when it is a literal."""
    if isinstance(value, ast.Call) and _callee(value.func) == ("shutil", "which") and value.args:
        program = value.args[0]
        if isinstance(program, ast.Constant) and isinstance(program.value, str):
            return (program.value,)
    return None


def _literal_strings(value: ast.AST) -> tuple[str, ...] | None:
    """A string literal, or a dict / tuple / list / set of them (a dict's keys and values)."""
    if isinstance(value, ast.Constant):
        return (value.value,) if isinstance(value.value, str) else None
    if isinstance(value, ast.Dict):
        items = [*value.keys, *value.values]
    elif isinstance(value, ast.Tuple | ast.List | ast.Set):
        items = value.elts
    else:
        return None
    if items and all(isinstance(i, ast.Constant) and isinstance(i.value, str) for i in items):
        return tuple(i.value for i in items)  # type: ignore[union-attr]
    return None


def _callee(func: ast.AST) -> tuple[str | None, str]:
    if isinstance(func, ast.Attribute):
        value = func.value
        owner = value.id if isinstance(value, ast.Name) else getattr(value, "attr", "?")
        return owner, func.attr
    if isinstance(func, ast.Name):
        return None, func.id
    return None, ""


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ"


@lru_cache(maxsize=256)
def import_closure(root: str, test_file: str) -> frozenset[str]:
    """Every repository file the test file imports, directly or through other repository files."""
    return closure(root, [test_file], module_index(root))


def closure(
    root: str,
    start: Iterable[str],
    index: Mapping[str, tuple[str, ...]],
    facts: Callable[[str, str], ModuleFacts] = module_facts,
) -> frozenset[str]:
    """``start`` and every repository file they import, directly or through each other."""
    seen = set(start)
    todo = list(seen)
    while todo:
        for name in facts(root, todo.pop()).imports:
            for path in resolve(index, name):
                if path not in seen:
                    seen.add(path)
                    todo.append(path)
    return frozenset(seen)
