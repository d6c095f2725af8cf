"""The dependency key of a test: a digest of every input that can change its outcome.

Two runs of one test id in one stage family with equal keys ran the same code on the same data
with the same arguments in the same environment, so the first's result stands for the second
(docs/reuse.md: the parts, why each is there, and the measurement that chose a static reading
over coverage). The parts:

- ``test``: the test id and the stage family;
- ``files``: the digest of each repository file the test can read that a static reading shows:
  the test file, the conftest chain from the repository root to its folder, the pytest
  configuration and the repository's own pytest plugins, every repository module those import
  (``import_graph``), and their data files (files or folders a string literal of one names, and
  the files beside a module that locates itself by ``__file__`` or package resources). When a
  file in that closure does something no static reading can follow (an import of a computed
  name, starting a program that may run repository code, an environment variable read by a
  computed name), ``files`` is the whole repository's digest instead and ``conservative`` says
  why: the key is never optimistic;
- ``suite_args``: the pytest arguments of the family's suites;
- ``catalog``: the family's catalog entry (everything but where it is written) and the waives that
  name the test;
- ``environment``: Python, the platform, every installed distribution's version, and the value of
  each environment variable the closure reads by name;
- ``gpu``: the GPU type and the driver version.
"""

from __future__ import annotations

import configparser
import dataclasses
import functools
import hashlib
import json
import os
import platform
import re
import shlex
import sys
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path, PurePosixPath

from stagebot.harness.results import environment_items, environment_lines
from stagebot.harness.reuse.import_graph import (
    ModuleFacts,
    build_index,
    closure,
    module_facts,
    repository_files,
)
from stagebot.stages.catalog import Family, Waive
from stagebot.stages.patterns import waive_matches

PARTS = ("test", "files", "suite_args", "catalog", "environment", "gpu")
CODE_PARTS = PARTS[:4]  # what the plan can compare; environment and gpu only the runner knows
PYTEST_CONFIGS = ("pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg", "conftest.py")
UNSET = "<unset>"
# pytest reads these at every start: more arguments (-p plugins among them), plugins to load
PYTEST_VARIABLES = {"PYTEST_ADDOPTS", "PYTEST_PLUGINS"}


@dataclass(frozen=True)
class Environment:
    """Where a test runs, as far as its outcome can depend on it."""

    distributions: tuple[tuple[str, str], ...]  # (name, version), sorted
    python: str
    platform: str
    gpu_type: str  # the catalog's GPU type, "CPU" for none
    gpu_driver: str  # the NVIDIA driver version, "none" without one
    variables: Mapping[str, str] = field(default_factory=dict)  # the process environment

    def lines(self) -> list[str]:
        """The whole environment but its variables, one line per item (a shard's result keeps
        them: a same-commit reuse compares them with where the shard would run now)."""
        return environment_lines(
            self.python, self.platform, (self.gpu_type, self.gpu_driver), self.distributions
        )

    def digest(self, read: tuple[str, ...]) -> str:
        """The ``environment`` part's digest for the variables ``read``, computed once per
        environment and set of variables (a shard's thousands of keys share a few)."""
        if read not in self._digests:
            self._digests[read] = _digest(self.described(read))
        return self._digests[read]

    @functools.cached_property
    def _digests(self) -> dict[tuple[str, ...], str]:
        return {}

    def described(self, read: Iterable[str]) -> dict[str, object]:
        """The ``environment`` part: the variables read by name, and nothing else of them."""
        return {
            "python": self.python,
            "platform": self.platform,
            "distributions": [f"{name}=={version}" for name, version in self.distributions],
            "variables": {name: self.variables.get(name, UNSET) for name in sorted(set(read))},
        }


def current_environment(gpu_type: str = "CPU", gpu_driver: str = "none") -> Environment:
    """This process's environment (GPU type and driver come from the stage that runs it)."""
    versions = {
        (dist.metadata["Name"] or "?").lower(): dist.version for dist in metadata.distributions()
    }
    return Environment(
        distributions=tuple(sorted(versions.items())),
        python=sys.version.split()[0],
        platform=f"{platform.system()}-{platform.machine()}",
        gpu_type=gpu_type,
        gpu_driver=gpu_driver,
        variables=dict(os.environ),
    )


def changed_lines(then: Iterable[str], now: Iterable[str]) -> str | None:
    """What differs between two ``Environment.lines()``, a distribution named with both
    versions ("transformers 5.24.0 -> 5.25.0", "kernels 0.19.1 (new)"); None when equal."""
    before, after = environment_items(then), environment_items(now)
    changes = []
    for name in sorted(before.keys() | after.keys()):
        if name not in before:
            changes.append(f"{name} {after[name]} (new)")
        elif name not in after:
            changes.append(f"{name} {before[name]} (gone)")
        elif before[name] != after[name]:
            changes.append(f"{name} {before[name]} -> {after[name]}")
    return ", ".join(changes) or None


@dataclass(frozen=True)
class FamilyInputs:
    """What a key takes from a stage family's catalog entry, as plain data: it travels in a
    matrix entry to the runner, which has no catalog."""

    name: str
    gpu_type: str
    suite_args: str  # the digest of the suites' pytest arguments
    entry: str  # the digest of the entry, all but its name, where it is written, its suites
    waives: tuple[tuple[str, str], ...] = ()  # (test id pattern, reason) on its GPU type
    plugins: tuple[str, ...] = ()  # modules the suites' arguments load by name (-p NAME)

    @classmethod
    def of(cls, family: Family, waives: Iterable[Waive] = ()) -> FamilyInputs:
        catalog_entry = {
            name: value
            for name, value in dataclasses.asdict(family).items()
            if name not in ("name", "source", "suites")  # the name is in "test"
        }
        return cls(
            family.name,
            family.gpu_type,
            _digest([suite.pytest_args() for suite in family.suites]),
            _digest(catalog_entry),
            tuple(sorted((w.test_id, w.reason) for w in waives if w.applies_to(family.gpu_type))),
            plugins_named(arg for suite in family.suites for arg in suite.pytest_args()),
        )

    def to_json(self) -> dict[str, str]:
        """Without the waives: a matrix entry carries them already (``from_json``)."""
        return {
            "name": self.name,
            "gpu_type": self.gpu_type,
            "suite_args": self.suite_args,
            "entry": self.entry,
            "plugins": list(self.plugins),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, str], waives: Iterable[Mapping[str, str]]):
        pairs = tuple(sorted((w["test_id"], w["reason"]) for w in waives))
        plugins = tuple(data.get("plugins", ()))
        names = (data["name"], data["gpu_type"], data["suite_args"], data["entry"])
        return cls(*names, pairs, plugins)


def plugins_named(args: Iterable[str]) -> tuple[str, ...]:
    """The modules pytest arguments load as plugins: ``-p NAME`` and ``-pNAME`` (not ``no:``)."""
    args = list(args)
    found = []
    for arg, following in zip(args, [*args[1:], ""], strict=False):
        if arg == "-p":
            name = following
        elif arg.startswith("-p"):
            name = arg[2:]
        else:
            continue
        if name and not name.startswith("no:"):
            found.append(name)
    return tuple(dict.fromkeys(found))


@dataclass(frozen=True)
class DependencyKey:
    test_id: str
    family: str
    parts: dict[str, str]  # part (PARTS) -> its digest
    files: dict[str, str]  # repository file -> its digest (every file when conservative)
    conservative: tuple[str, ...]  # "path: line N: what" — why ``files`` is the whole repository

    @property
    def digest(self) -> str:
        return _digest(self.parts)[:32]

    @property
    def code(self) -> str:
        """The digest of the parts a plan can compare (``CODE_PARTS``): the lookup key."""
        return code_digest(self.parts)


def code_digest(parts: Mapping[str, str]) -> str:
    return _digest({part: parts.get(part) for part in CODE_PARTS})[:32]


def dependency_key(
    root: str | Path | Repository,
    test_id: str,
    family: Family | FamilyInputs,
    environment: Environment,
    waives: Iterable[Waive] = (),
    observed: Observation | None = None,
) -> DependencyKey:
    """The key of ``test_id`` (a pytest node id relative to ``root``) in ``family``; pass one
    ``Repository`` for the keys of many tests of one checkout. ``waives`` (the catalog's) only
    with a ``Family``: ``FamilyInputs`` holds its own. ``observed``: what a run of its test file
    opened, imported and started (``harness/reuse/observe.py``); None when nothing was observed,
    and then what only a run can tell makes the key conservative."""
    repo = root if isinstance(root, Repository) else Repository(root)
    if not isinstance(family, FamilyInputs):
        family = FamilyInputs.of(family, waives)
    inputs = repo.inputs(test_id.split("::")[0], family.plugins, observed)
    catalog_entry = {"entry": family.entry}
    catalog_entry["waives"] = sorted(
        [pattern, reason] for pattern, reason in family.waives if waive_matches(test_id, pattern)
    )
    parts = {
        "test": _digest([test_id, family.name]),
        "files": inputs.digest,
        "suite_args": family.suite_args,
        "catalog": _digest(catalog_entry),
        "environment": environment.digest(inputs.environment),
        "gpu": _digest([environment.gpu_type, environment.gpu_driver]),
    }
    if inputs.observed:
        parts["observed"] = json.dumps(inputs.observed)  # the files next time's key adds
    return DependencyKey(test_id, family.name, parts, inputs.files, inputs.conservative)


@dataclass(frozen=True)
class Observation:
    """What a run of a test file did that its static reading may miss (``observe.py``)."""

    files: tuple[str, ...] = ()  # repository files it opened or imported
    started: tuple[str, ...] = ()  # programs it started that may run repository code


class Repository:
    """One checkout, read once: its files, module index and file digests, shared by the keys of
    all its tests."""

    def __init__(self, root: str | Path):
        self.root = str(Path(root).resolve())
        self.files = repository_files(self.root)
        self.present = set(self.files)
        self.index = build_index(self.files)
        self.under: dict[str, list[str]] = {}  # a file or folder -> the data files it names
        self.folders: dict[str, set[str]] = {}  # a folder's name -> the folders of that name
        for path in self.files:
            if not path.endswith(".py"):
                for named in (path, *map(str, PurePosixPath(path).parents)):
                    self.under.setdefault(named, []).append(path)
            for folder in PurePosixPath(path).parents:
                self.folders.setdefault(folder.name, set()).add(str(folder))
        self.native = [path for path in self.files if is_native_library(path)]
        self._digests: dict[str, str] = {}
        self._facts: dict[str, ModuleFacts] = {}
        self._data: dict[str, frozenset[str]] = {}
        self._inputs: dict[tuple[str, tuple[str, ...]], TestInputs] = {}
        self._observed: dict[tuple[str, tuple[str, ...], Observation | None], TestInputs] = {}

    def inputs(
        self, test_file: str, plugins: tuple[str, ...] = (), observed: Observation | None = None
    ) -> TestInputs:
        """``TestInputs.read`` of ``test_file`` in a session that loads ``plugins`` by name, with
        what a run ``observed`` (``TestInputs.observed_as``), once per checkout (its tests
        share it)."""
        if (test_file, plugins) not in self._inputs:
            self._inputs[test_file, plugins] = TestInputs.read(self, test_file, plugins)
        if (test_file, plugins, observed) not in self._observed:
            static = self._inputs[test_file, plugins]
            self._observed[test_file, plugins, observed] = static.observed_as(self, observed)
        return self._observed[test_file, plugins, observed]

    def module_file(self, name: str) -> list[str]:
        """The repository file of the module ``name`` (as pytest's -p or an entry point names
        it), nearest the root; none for a module of an installed distribution."""
        candidates = self.index.get(name) or self.index.get(name.partition(".")[2], ())
        return list(candidates[:1])

    def package_folder(self, package: str) -> list[str]:
        """The folder of the package ``package`` (dotted, as a resource call names it): the
        repository folder whose path ends with its parts, nearest the root; [] for none."""
        parts = package.split(".")
        found = {
            folder
            for folder in self.folders.get(parts[-1], ())
            if PurePosixPath(folder).parts[-len(parts) :] == tuple(parts)
        }
        if not found:
            return []
        nearest = min(folder.count("/") for folder in found)
        return [folder for folder in sorted(found) if folder.count("/") == nearest]

    def facts(self, root: str, path: str) -> ModuleFacts:
        if path not in self._facts:
            self._facts[path] = module_facts(root, path)
        return self._facts[path]

    def data_files(self, module: str) -> frozenset[str]:
        """The files and folders a string literal of ``module`` names (relative to its folder or
        to the repository root), the non-Python files beside it when it locates itself
        (``__file__``, package resources: it may open them by a computed name), every file under
        the folders of the packages it reads resources of, and the native libraries beside it
        (every one in the repository when it loads one by ctypes or cffi)."""
        if module not in self._data:
            facts = self.facts(self.root, module)
            folder = str(PurePosixPath(module).parent)
            found: set[str] = set(self.native if facts.loads_native else ())
            found.update(p for p in self.under.get(folder, ()) if _beside(p, folder))
            if not facts.locates_itself:
                found = {p for p in found if is_native_library(p)}
            for literal in facts.literals:
                for base in (folder, "."):
                    named = os.path.normpath(os.path.join(base, literal)).replace(os.sep, "/")
                    if named not in (".", "..") and not named.startswith("../"):
                        found.update(self.under.get(named, ()))
            for package in facts.resources:
                for resources in self.package_folder(package) or [package.replace(".", "/")]:
                    found.update(self.under.get(resources, ()))
            self._data[module] = frozenset(found)
        return self._data[module]

    def digest(self, path: str) -> str:
        if path not in self._digests:
            try:
                self._digests[path] = hashlib.sha256(Path(self.root, path).read_bytes()).hexdigest()
            except OSError as error:
                self._digests[path] = f"unreadable: {type(error).__name__}"
        return self._digests[path]


@dataclass(frozen=True)
class TestInputs:
    """The repository files one test file's outcome can depend on, with their digests."""

    files: dict[str, str]
    environment: tuple[str, ...]  # environment variables read by name
    conservative: tuple[str, ...]
    needs_run: tuple[str, ...] = ()  # "path: line N: what" that only an observed run can tell
    observed: tuple[str, ...] = ()  # files added from an observed run (not in the static set)

    @functools.cached_property
    def digest(self) -> str:
        """The ``files`` part (once per test file: its tests share it)."""
        return _digest(self.files)

    @classmethod
    def read(cls, repo: Repository, test_file: str, plugins: tuple[str, ...] = ()) -> TestInputs:
        root = repo.root
        named = [path for name in plugins for path in repo.module_file(name)]
        start = {test_file, *_conftests(test_file), *_session_files(repo), *named} & repo.present
        code = closure(root, sorted(p for p in start if p.endswith(".py")), repo.index, repo.facts)
        facts = {path: repo.facts(root, path) for path in sorted(code)}
        launchers = {name for fact in facts.values() for name in fact.launchers}
        importers = {importer for fact in facts.values() for importer in fact.importers}
        blind = [
            f"{path}: {what}"
            for path, fact in facts.items()
            for what in fact.blind_with(launchers, importers)
        ]
        declared = {option for fact in facts.values() for option in fact.options}
        blind += [
            f"{path}: {what}, an option no module of the key declares"
            for path, fact in facts.items()
            for what, option in fact.computed_options
            if option not in declared
        ]
        blind += [
            f"{path}: runs {script}, which is not a repository file"
            for path, fact in facts.items()
            for script in fact.scripts
            if not _script_found(repo, path, script)
        ]
        if test_file not in repo.present:  # what it imports cannot be read: the whole repository
            blind.append(f"{test_file}: not among the repository's files that were read")
        data = _data_files(repo, code)
        data |= config_named(repo, start | data)
        chosen = repo.files if blind else sorted(code | start | data)
        environment = {name for fact in facts.values() for name in fact.environment}
        environment |= PYTEST_VARIABLES
        files = {path: repo.digest(path) for path in chosen}
        needs = tuple(f"{path}: {what}" for path, fact in facts.items() for what in fact.observed)
        return cls(files, tuple(sorted(environment)), tuple(blind), needs)

    def observed_as(self, repo: Repository, observation: Observation | None) -> TestInputs:
        """These inputs with a run's observation: the repository files it opened or imported
        that the static reading left out join ``files`` (not outputs or caches: they are no
        repository files, ``repository_files``); without one, what only a run can tell makes
        them conservative, and so does a program the run started that may run our code."""
        if self.conservative:
            return self
        if observation is None:
            if not self.needs_run:
                return self
            why = tuple(f"{what} (no observed run)" for what in self.needs_run)
        elif self.needs_run and observation.started:
            why = tuple(f"observed: started {command}" for command in observation.started)
        else:
            extra = sorted(set(observation.files) & repo.present - self.files.keys())
            if not extra:
                return self
            files = {**self.files, **{path: repo.digest(path) for path in extra}}
            return dataclasses.replace(self, files=dict(sorted(files.items())), observed=extra)
        everything = {path: repo.digest(path) for path in repo.files}
        return dataclasses.replace(self, files=everything, conservative=why)


def _script_found(repo: Repository, module: str, script: str) -> bool:
    folder = str(PurePosixPath(module).parent)
    candidates = {os.path.normpath(os.path.join(base, script)) for base in (folder, ".")}
    return bool(candidates & repo.present)


# Tools whose tables in pyproject.toml name paths of their own (sources, outputs, excludes),
# never data a test reads.
_TOOL_TABLES = {
    "black", "bandit", "bumpversion", "cibuildwheel", "codespell", "commitizen", "coverage",
    "flit", "hatch", "importlinter", "isort", "maturin", "mypy", "pdm", "poetry", "pydocstyle",
    "pylint", "pyright", "ruff", "scikit-build", "semantic_release", "setuptools",
    "setuptools_scm", "towncrier", "uv", "vulture",
}  # fmt: skip
_CONFIG_SUFFIXES = (".toml", ".yaml", ".yml", ".json", ".ini", ".cfg", ".env", ".conf")
_CONFIG_LIMIT = 256_000  # characters of a configuration file read for the paths it names
_DATA_SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,8}$")
_COMMENT_LINE = re.compile(r"^[ \t]*[#;].*$", re.MULTILINE)


def config_named(repo: Repository, files: Iterable[str]) -> set[str]:
    """The repository paths that the configuration files among ``files`` name (the data path
    in a settings file, the env file in a pyproject.toml tool table): code may open them by
    the value it reads, which no literal shows. A named file is in, a named folder's data files
    are (not from pyproject.toml, whose tables name source folders), and a path-like value that
    names nothing yet is in as absent, so creating it changes the key."""
    found: set[str] = set()
    todo = [path for path in files if path.endswith(_CONFIG_SUFFIXES)]
    done: set[str] = set()
    while todo:
        config = todo.pop()
        if config in done:
            continue
        done.add(config)
        project = PurePosixPath(config).name == "pyproject.toml"
        folder = str(PurePosixPath(config).parent)
        for value in _config_values(repo, config, project):
            for named in _named_paths(folder, value):
                if named in repo.present:
                    found.add(named)
                    if named.endswith(_CONFIG_SUFFIXES):
                        todo.append(named)
                elif not project and named in repo.under:
                    found.update(repo.under[named])
                elif _path_like(value):
                    found.add(named)  # absent now: digested as unreadable
    return found


def _named_paths(folder: str, value: str) -> list[str]:
    """The repository paths a configuration file's ``value`` may name: from the file's folder,
    then from the root; one outside the repository, or the root itself, names none."""
    joined = (
        os.path.normpath(os.path.join(base, value)).replace(os.sep, "/") for base in (folder, ".")
    )
    return [
        path for path in joined if path not in (".", "..") and not path.startswith(("../", "/"))
    ]


def _path_like(value: str) -> bool:
    if any(c in value for c in " {}$*:@<>|\\"):
        return False
    return "/" in value or _DATA_SUFFIX.search(value) is not None


def _config_values(repo: Repository, config: str, project: bool) -> list[str]:
    """The string values of a configuration file (of pyproject.toml: its tool tables but those
    of ``_TOOL_TABLES``), or every quoted or assigned word of one that is not TOML or JSON."""
    try:
        text = Path(repo.root, config).read_text(errors="replace")[:_CONFIG_LIMIT]
    except OSError:
        return []
    if project:
        try:
            tools = tomllib.loads(text).get("tool", {})
        except tomllib.TOMLDecodeError:
            return []
        return _strings_in({k: v for k, v in tools.items() if k not in _TOOL_TABLES})
    if config.endswith(".json"):
        try:
            return _strings_in(json.loads(text))
        except ValueError:
            pass
    elif config.endswith(".toml"):
        try:
            return _strings_in(tomllib.loads(text))
        except tomllib.TOMLDecodeError:
            pass
    elif config.endswith((".yaml", ".yml")):
        import yaml  # the catalog's parser; only for a test's own configuration files

        try:
            return _strings_in(list(yaml.safe_load_all(text)))
        except yaml.YAMLError:
            pass
    text = _COMMENT_LINE.sub("", text)  # a comment is never a value code reads
    words = re.findall(r"[\"']([^\"'\n]{1,200})[\"']|[:=][ \t]*([^\s\"'#,\]\[{}]{1,200})", text)
    return [quoted or bare for quoted, bare in words]


def _strings_in(value: object) -> list[str]:
    if isinstance(value, str):
        return [value] if 0 < len(value) <= 200 else []
    if isinstance(value, Mapping):
        return [s for item in value.values() for s in _strings_in(item)]
    if isinstance(value, list | tuple):
        return [s for item in value for s in _strings_in(item)]
    return []


def is_native_library(path: str) -> bool:
    """A compiled library Python code may load: an extension module or a ctypes target."""
    name = PurePosixPath(path).name
    return name.endswith((".so", ".pyd", ".dylib", ".dll")) or ".so." in name


def _beside(path: str, folder: str) -> bool:
    return str(PurePosixPath(path).parent) == folder


def _conftests(test_file: str) -> list[str]:
    folder = PurePosixPath(test_file).parent
    return [str(PurePosixPath(f, "conftest.py")) for f in (folder, *folder.parents)]


def _session_files(repo: Repository) -> list[str]:
    """The pytest configuration files and the repository's own pytest plugins (pytest11 entry
    points): every test session loads them, whatever it imports."""
    found = [name for name in PYTEST_CONFIGS if name in repo.present]
    if "pyproject.toml" in repo.present:
        try:
            text = Path(repo.root, "pyproject.toml").read_text(errors="replace")
            project = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            project = {}
        plugins = project.get("project", {}).get("entry-points", {}).get("pytest11", {})
        for module in plugins.values():
            found += repo.module_file(str(module).split(":")[0])
        found += _addopts_plugins(repo, project.get("tool", {}).get("pytest", {}))
    if "pytest.ini" in repo.present:
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read_string(Path(repo.root, "pytest.ini").read_text(errors="replace"))
        except configparser.Error:
            pass
        found += _addopts_plugins(repo, {"addopts": parser.get("pytest", "addopts", fallback="")})
    return found


def _addopts_plugins(repo: Repository, settings: Mapping) -> list[str]:
    """The repository modules a pytest configuration's ``addopts`` loads with ``-p``
    (``[tool.pytest.ini_options]``, ``[tool.pytest]`` or pytest.ini's ``[pytest]``)."""
    found = []
    for table in (settings.get("ini_options", {}), settings):
        addopts = table.get("addopts", "") if isinstance(table, Mapping) else ""
        if isinstance(addopts, str):
            try:
                args = shlex.split(addopts)
            except ValueError:  # unbalanced quotes: pytest's own start fails on them anyway
                args = addopts.split()
        else:
            args = [str(a) for a in addopts]
        found += [path for name in plugins_named(args) for path in repo.module_file(name)]
    return found


def _data_files(repo: Repository, code: Iterable[str]) -> set[str]:
    """The data files of every module in ``code`` (``Repository.data_files``)."""
    return set().union(*(repo.data_files(module) for module in code))


def _digest(value: object) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def changed_inputs(before: DependencyKey, after: DependencyKey) -> list[str]:
    """Why ``after`` does not reuse ``before``: each part that differs, and for ``files`` the
    files added, removed or changed (what ``bot stages --explain-reuse`` will print)."""
    reasons = []
    for part in PARTS:
        if before.parts.get(part) == after.parts.get(part):
            continue
        if part != "files":
            reasons.append(f"{part} changed")
            continue
        if after.conservative and not before.conservative:
            reasons.append(f"files: conservative now ({after.conservative[0]})")
        changed = sorted(
            path
            for path in before.files.keys() | after.files.keys()
            if before.files.get(path) != after.files.get(path)
        )
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if changed[5:] else "")
        reasons.append(f"files changed: {shown}" if changed else "files: the set changed")
    return reasons
