"""A pytest child process, followed: what ``[sys.executable, "-m", "pytest", ARGS...]`` (or
``["pytest", ARGS...]``) reads, when a static reading can tell its arguments.

The child runs the test files and folders its arguments name, their conftests, the plug-ins its
``-p`` options load and the pytest configuration beside them: those join the starting module's
imports and literals (``import_graph``), so they and their own closures are in the key. Anything
it cannot tell keeps the key conservative: a computed argument where pytest takes a path, a
computed ``-p``, an option that changes what pytest loads (``-c``, ``--rootdir``, ``-o``,
``--pyargs``), a command with no test path (pytest's configured ones then run), a ``cwd``.
A computed *value* of an option that takes one is accepted when the option is pytest's own and
names nothing pytest loads (``-k``, ``-m``, ``--tb``) or when the repository code in the key
declares it (``addoption`` with a value: ``--cute-tactic NAME``); the key then still holds the
code that reads it (``options`` / ``computed_options`` of ``ModuleFacts``).

Arguments are known through literals, names bound in the function or the module, ``for`` and
comprehension targets over known lists, ``Path(__file__).parent / "x"``, and a parameter of a
function of the module whose every call passes known arguments (``_run_suite(tmp_path, "-k",
"x")``): each value is a list of alternatives, a command being any one of them.
"""

from __future__ import annotations

import ast
import itertools
import posixpath
from dataclasses import dataclass, field
from typing import Protocol

_RUNNERS = {"pytest", "py.test"}
# pytest's options that change which files or configuration it loads: not followed.
_LOADING_OPTIONS = {
    "-c",
    "--config-file",
    "--rootdir",
    "--confcutdir",
    "-o",
    "--override-ini",
    "--pyargs",
    "--inifile",
}
# pytest's own options whose value names nothing it loads: a computed value is fine.
_VALUE_OPTIONS = {
    "-k",
    "-m",
    "--tb",
    "-W",
    "--pythonwarnings",
    "--maxfail",
    "--durations",
    "-r",
    "--color",
    "--capture",
    "--log-level",
    "--log-cli-level",
    "--deselect",
    "--ignore",
    "--ignore-glob",
    "--basetemp",
    "--junitxml",
    "--junit-xml",
}
# Variables pytest reads more arguments or plug-ins from: a module that names one may set them
# for its child (its own process's values are in the key's environment part).
_ARGUMENT_VARIABLES = {"PYTEST_ADDOPTS", "PYTEST_PLUGINS"}
_FLAG_ACTIONS = {"store_true", "store_false", "store_const", "count", "append_const", "help"}
_CONFIG_FILES = ("pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")  # rootdir candidates
_SUBMODULES = ".*"  # import_graph.SUBMODULES: every module under a folder
_MAX_ALTERNATIVES = 64  # more ways a command can be: not followed
_DEPTH = 30  # nested expressions and bindings followed, at most
ROOT = "<root>"  # a path from ``__file__``: relative to the repository root, wherever it runs


class _ModuleReader(Protocol):  # import_graph._Reader, as far as this module uses it
    package: tuple[str, ...]
    tree: ast.Module

    def _qualified(self, node: ast.AST) -> str | None: ...


@dataclass(frozen=True)
class Repeat:
    """A computed number of elements, each one of ``alternatives``."""

    alternatives: tuple


@dataclass
class PytestChild:
    """What a pytest child adds to the module that starts it."""

    imports: list[str] = field(default_factory=list)  # test modules, conftests, plug-ins
    literals: list[str] = field(default_factory=list)  # test paths and config files
    blind: list[str] = field(default_factory=list)  # why it cannot be followed
    options: list[str] = field(default_factory=list)  # options given a computed value


def declared_options(call: ast.Call) -> tuple[str, ...]:
    """The options an ``addoption("--name", ...)`` call declares with a value (no flag
    ``action``); () for a flag or any other call."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "addoption"):
        return ()
    action = next((k.value for k in call.keywords if k.arg == "action"), None)
    if isinstance(action, ast.Constant) and action.value in _FLAG_ACTIONS:
        return ()
    return tuple(
        a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
    )


def read(reader: _ModuleReader, command: ast.expr | None, call: ast.Call) -> PytestChild | None:
    """The child ``call`` starts with ``command``, when every way the command can be is a pytest
    run; None when none is (it is no pytest child: other rules read it)."""
    if command is None:
        return None
    values = _Values(reader)
    alternatives = values.of(command, {}, 0)
    runs = [_pytest_arguments(alternative) for alternative in alternatives]
    if all(run is None for run in runs):
        return None
    child = PytestChild()
    if any(run is None for run in runs):
        child.blind.append("starts pytest or another program, a computed choice")
        return child
    if any(k.arg == "cwd" for k in call.keywords):
        child.blind.append("starts pytest in another folder (cwd)")
    if values.names_any(_ARGUMENT_VARIABLES):
        child.blind.append("may give pytest arguments by its environment (PYTEST_ADDOPTS)")
    folder = "/".join(reader.package)
    for arguments in runs:
        _follow(arguments, folder, child)  # type: ignore[arg-type]
    child.imports = list(dict.fromkeys(child.imports))
    child.literals = list(dict.fromkeys(child.literals))
    return child


def _pytest_arguments(command: object) -> tuple | None:
    """The arguments after ``python -m pytest`` / ``pytest``; None for another command."""
    if not isinstance(command, tuple) or not command:
        return None
    program = command[0]
    if not isinstance(program, str):
        return None
    name = posixpath.basename(program)
    if name in _RUNNERS:
        return command[1:]
    if (program == _Values.PYTHON or name.startswith("python")) and command[1:3] in (
        ("-m", "pytest"),
        ("-m", "py.test"),
    ):
        return command[3:]
    return None


def _follow(arguments: tuple, folder: str, child: PytestChild) -> None:
    named_path = False
    previous: str | None = None  # the option before this argument, when it may take a value
    for argument in arguments:
        if isinstance(argument, Repeat) or not isinstance(argument, str | None):
            child.blind.append("pytest given a computed number of arguments")
            previous = None
            continue
        if previous == "-p":
            if argument is None:
                child.blind.append("pytest -p of a computed plug-in")
            elif not argument.startswith("no:"):
                child.imports.append(argument)
            previous = None
            continue
        if argument is None:
            if previous is None:
                child.blind.append("pytest given a computed test path")
                named_path = True  # said already
            elif previous not in _VALUE_OPTIONS:
                child.options.append(previous)
            previous = None
            continue
        option = argument.split("=", 1)[0]
        if argument[:2] in _LOADING_OPTIONS:  # a short option with its value attached: -cFILE
            option = argument[:2]
        if option in _LOADING_OPTIONS:
            child.blind.append(f"pytest {option} changes what it loads")
        elif argument.startswith("-p") and not argument.startswith("--") and argument != "-p":
            if not argument[2:].startswith("no:"):
                child.imports.append(argument[2:])
        elif argument.startswith("-"):
            previous = argument if "=" not in argument else None
            continue
        else:
            named_path |= previous is None
            _test_path(argument, folder, child)
        previous = None
    if not named_path:
        child.blind.append("pytest runs its configured test paths (none named)")


def _test_path(argument: str, folder: str, child: PytestChild) -> None:
    """A test file or folder (relative to the repository root or, over-including, to the
    starting module's folder), with the conftests and pytest configuration above it; any other
    word (an option's value) names no repository file and adds nothing."""
    path = argument.split("::", 1)[0]
    if path == ROOT or path.startswith(ROOT + "/"):
        bases, path = ("",), path.removeprefix(ROOT).lstrip("/")
    elif posixpath.isabs(path):
        child.blind.append(f"pytest given {path}, outside the repository")
        return
    else:
        bases = tuple(dict.fromkeys(("", folder)))
    for base in bases:
        named = posixpath.normpath(posixpath.join(base, path))
        if named == ".." or named.startswith("../"):
            continue
        if named == ".":  # blind: the key is conservative, whatever else the path adds
            child.blind.append("pytest given the repository's root: every test under it")
            return
        child.literals.append(named)
        if named.endswith(".py"):
            child.imports.append(named[:-3].replace("/", "."))
            above = posixpath.dirname(named)
        else:
            child.imports.append(named.replace("/", ".") + _SUBMODULES)
            above = named
        parts = above.split("/") if above else []
        for prefix in [*("/".join(parts[:end]) + "/" for end in range(len(parts), 0, -1)), ""]:
            child.imports.append(f"{prefix}conftest".replace("/", "."))
            child.literals += [prefix + config for config in _CONFIG_FILES]


class _Values:
    """The values an expression of one module can have, as alternatives: a string, None (not
    known), a tuple (a list of values) or a ``Repeat``."""

    PYTHON = "<sys.executable>"

    def __init__(self, reader: _ModuleReader):
        self.reader = reader
        self.tree = reader.tree
        self.folder = "/".join(reader.package)
        self._parameters: dict[tuple[str, str], list] = {}
        self._names: dict[tuple[str, int], list | None] = {}
        self.owner: dict[int, ast.AST] = {}  # node -> the innermost function holding it
        for node in ast.walk(self.tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                for inner in ast.walk(node):
                    if inner is not node:
                        self.owner[id(inner)] = node

    def names_any(self, words: set[str]) -> bool:
        """Whether a string literal of the module is one of ``words``."""
        return any(
            isinstance(node, ast.Constant) and node.value in words for node in ast.walk(self.tree)
        )

    def of(self, node: ast.AST, env: dict[str, list], depth: int) -> list:
        if depth > _DEPTH:
            return [None]
        found = self._of(node, env, depth + 1)
        unique = list(dict.fromkeys(found))
        return unique if len(unique) <= _MAX_ALTERNATIVES else [None]

    def _of(self, node: ast.AST, env: dict[str, list], depth: int) -> list:
        if isinstance(node, ast.Constant):
            return [node.value if isinstance(node.value, str) else None]
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            return self._sequence(node.elts, env, depth)
        if isinstance(node, ast.ListComp | ast.GeneratorExp):
            return self._comprehension(node, env, depth)
        if isinstance(node, ast.Name):
            return self._name(node, env, depth)
        if isinstance(node, ast.Attribute):
            return self._attribute(node, env, depth)
        if isinstance(node, ast.Call):
            return self._call(node, env, depth)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div | ast.Add):
            pairs = itertools.product(
                self.of(node.left, env, depth), self.of(node.right, env, depth)
            )
            join = _join if isinstance(node.op, ast.Div) else _add
            return [join(left, right) for left, right in pairs]
        if isinstance(node, ast.IfExp):
            return self.of(node.body, env, depth) + self.of(node.orelse, env, depth)
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
            return self.of(node.value, env, depth)  # a part: over-including, the whole
        return [None]

    def _sequence(self, elements: list[ast.expr], env: dict[str, list], depth: int) -> list:
        parts = []
        for element in elements:
            if isinstance(element, ast.Starred):
                values = self.of(element.value, env, depth)
                parts.append([v if isinstance(v, tuple) else (Repeat((None,)),) for v in values])
            else:
                parts.append([(value,) for value in self.of(element, env, depth)])
        return _products(parts)

    def _comprehension(self, node: ast.ListComp | ast.GeneratorExp, env, depth) -> list:
        if len(node.generators) != 1:
            return [None]
        generator = node.generators[0]
        found = []
        for iterable in self.of(generator.iter, env, depth):
            if not isinstance(iterable, tuple):
                iterable = (Repeat((None,)),)
            parts = []
            for member in iterable:
                if isinstance(member, Repeat):
                    values = [
                        value
                        for each in member.alternatives
                        for value in self.of(node.elt, _with(env, generator.target, each), depth)
                    ]
                    parts.append([(Repeat(tuple(dict.fromkeys(values))),)])
                else:
                    inner = _with(env, generator.target, member)
                    parts.append([(value,) for value in self.of(node.elt, inner, depth)])
            found += _products(parts)
        return found

    def _attribute(self, node: ast.Attribute, env, depth) -> list:
        if self.reader._qualified(node) == "sys.executable":
            return [self.PYTHON]
        if node.attr == "parent":
            return [_parent(value) for value in self.of(node.value, env, depth)]
        return [None]

    def _call(self, node: ast.Call, env, depth) -> list:
        function = self.reader._qualified(node.func) or ""
        if not function and isinstance(node.func, ast.Name):
            function = node.func.id  # a builtin (a module binding of the name is qualified)
        method = node.func.attr if isinstance(node.func, ast.Attribute) else None
        if method in ("resolve", "absolute") and not node.args:
            return self.of(node.func.value, env, depth)  # type: ignore[attr-defined]
        if function in ("str", "list", "tuple", "os.fspath") and len(node.args) == 1:
            return self.of(node.args[0], env, depth)
        if function in ("pathlib.Path", "pathlib.PurePath", "pathlib.PurePosixPath"):
            if not node.args:
                return [None]
            values = [self.of(argument, env, depth) for argument in node.args]
            found = []
            for combination in itertools.product(*values):
                path = combination[0]
                for part in combination[1:]:
                    path = _join(path, part)
                found.append(path)
            return found
        if (
            function == "zip"
            and node.args
            and not any(isinstance(a, ast.Starred) for a in node.args)
        ):
            return self._zip(node, env, depth)
        return [None]

    def _zip(self, node: ast.Call, env, depth) -> list:
        found = []
        for lists in itertools.product(*(self.of(a, env, depth) for a in node.args)):
            first = lists[0]
            if not isinstance(first, tuple):
                return [None]
            rows = []
            for position, member in enumerate(first):
                row = tuple(
                    other[position] if isinstance(other, tuple) and position < len(other) else None
                    for other in lists[1:]
                )
                if isinstance(member, Repeat):
                    rows.append(Repeat(tuple((each, *row) for each in member.alternatives)))
                else:
                    rows.append((member, *row))
            found.append(tuple(rows))
        return found

    def _name(self, node: ast.Name, env: dict[str, list], depth: int) -> list:
        if node.id in env:
            return env[node.id]
        if node.id == "__file__":
            return [posixpath.join(ROOT, self.folder, "__file__")]
        scope = self.owner.get(id(node), self.tree)
        while True:
            found = self._bindings(node.id, scope, depth)
            if found is not None:
                return found
            if scope is self.tree:
                return [None]
            scope = self.owner.get(id(scope), self.tree)

    def _bindings(self, name: str, scope: ast.AST, depth: int) -> list | None:
        """Every value ``name`` is bound to in ``scope`` (a function or the module; not in the
        functions inside it); None when it binds no ``name``. Read once per name and scope (a
        binding that refers to itself reads as not known)."""
        memo = (name, id(scope))
        if memo not in self._names:
            self._names[memo] = [None]
            self._names[memo] = self._read_bindings(name, scope, depth)
        return self._names[memo]

    def _read_bindings(self, name: str, scope: ast.AST, depth: int) -> list | None:
        if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
            if name in _parameter_names(scope):
                return self._parameter(scope, name, depth)
        found: list = []
        read: set[int] = set()  # the targets read below: every other store is not followed
        nodes = list(_own_nodes(scope))
        for node in nodes:
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                for target in getattr(node, "targets", None) or [node.target]:
                    stores = [n for n in ast.walk(target) if _stores(n, name)]
                    read.update(map(id, stores))
                    for value in self.of(node.value, {}, depth) if stores else ():
                        found += _bind(target, value).get(name, [None])
            elif isinstance(node, ast.For | ast.comprehension):
                stores = [n for n in ast.walk(node.target) if _stores(n, name)]
                read.update(map(id, stores))
                for iterable in self.of(node.iter, {}, depth) if stores else ():
                    for member in _members(iterable):
                        found += _bind(node.target, member).get(name, [None])
        for node in nodes:
            if (_stores(node, name) and id(node) not in read) or _names(node, name):
                found.append(None)  # an import, a def, a with target, an augmented assignment
                read.add(id(node))
        return found if read else None

    def _parameter(self, function: ast.FunctionDef | ast.AsyncFunctionDef, name: str, depth: int):
        """A parameter's values: what every call of the function in this module passes; not
        known when the function is named anywhere but in a call or never called here."""
        if (function.name, name) in self._parameters:
            return self._parameters[function.name, name]
        self._parameters[function.name, name] = [None]  # while being read: a recursion
        calls = [
            node
            for node in ast.walk(self.tree)
            if isinstance(node, ast.Call) and _is_name(node.func, function.name)
        ]
        named = [n for n in ast.walk(self.tree) if _is_name(n, function.name)]
        if len(named) != len(calls):  # passed on as a value: its calls cannot all be seen
            return [None]
        if not calls:
            return [None]
        positional = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
        vararg = function.args.vararg
        found: list = []
        for call in calls:
            if vararg is not None and name == vararg.arg:
                start = len(positional)
                found += self._sequence(call.args[start:], {}, depth)
                continue
            position = positional.index(name) if name in positional else None
            starred = any(isinstance(a, ast.Starred) for a in call.args)
            if position is not None and position < len(call.args) and not starred:
                found += self.of(call.args[position], {}, depth)
                continue
            keyword = next((k.value for k in call.keywords if k.arg == name), None)
            default = _default(function, name)
            value = keyword if keyword is not None else default
            found += [None] if value is None or starred else self.of(value, {}, depth)
        self._parameters[function.name, name] = found
        return found


def _parameter_names(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    arguments = function.args
    names = [a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)]
    names += [a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None]
    return set(names)


def _default(function: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> ast.expr | None:
    positional = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    defaults = function.args.defaults
    offset = len(positional) - len(defaults)
    if name in positional and positional.index(name) >= offset:
        return defaults[positional.index(name) - offset]
    for argument, default in zip(function.args.kwonlyargs, function.args.kw_defaults, strict=True):
        if argument.arg == name:
            return default
    return None


def _own_nodes(scope: ast.AST):
    """The nodes of ``scope``, not those of the functions and classes inside it (comprehensions
    count: their targets bind in them, over-including)."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            todo += ast.iter_child_nodes(node)


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _stores(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store)


def _names(node: ast.AST, name: str) -> bool:
    """Binds ``name`` other than by an assignment or a loop target."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name == name
    if isinstance(node, ast.alias):
        return (node.asname or node.name.split(".")[0]) == name
    if isinstance(node, ast.ExceptHandler):
        return node.name == name
    return False


def _bind(target: ast.AST, value: object) -> dict[str, list]:
    """Names of an assignment or loop target -> their values, when it takes ``value``."""
    if isinstance(target, ast.Name):
        return {target.id: [value]}
    if isinstance(target, ast.Tuple | ast.List):
        if isinstance(value, tuple) and len(value) == len(target.elts):
            bound: dict[str, list] = {}
            for element, part in zip(target.elts, value, strict=True):
                for name, values in _bind(element, part).items():
                    bound.setdefault(name, []).extend(values)
            return bound
        names = [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]
        return {name: [None] for name in names}
    return {}


def _with(env: dict[str, list], target: ast.AST, value: object) -> dict[str, list]:
    """``env`` with a comprehension's target bound to ``value``."""
    return {**env, **_bind(target, value)}


def _members(iterable: object) -> list:
    if not isinstance(iterable, tuple):
        return [None]
    found = []
    for member in iterable:
        found += list(member.alternatives) if isinstance(member, Repeat) else [member]
    return found


def _products(parts: list[list[tuple]]) -> list:
    count = 1
    for alternatives in parts:
        count *= len(alternatives)
        if count > _MAX_ALTERNATIVES:
            return [None]
    return [tuple(itertools.chain(*combination)) for combination in itertools.product(*parts)]


def _join(left: object, right: object) -> str | None:
    if not isinstance(left, str) or not isinstance(right, str):
        return None
    return posixpath.normpath(posixpath.join(left, right))


def _add(left: object, right: object) -> object:
    if isinstance(left, str) and isinstance(right, str):
        return left + right
    if isinstance(left, tuple) and isinstance(right, tuple):
        return left + right
    return None


def _parent(path: object) -> str | None:
    if not isinstance(path, str):
        return None
    return posixpath.dirname(path) or "."
