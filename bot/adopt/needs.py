"""What a repository's tests need on a runner beyond a bare checkout and `pip install .[extras]`:
its git submodules, its Git LFS files, and the distributions its test files import.

`bot init` generates what it can from this reading (the stage checkout's submodules and LFS, an
extra for an area whose tests import what only that extra installs, the tests' requirements
file) and says what to add for the rest; `bot doctor` checks the written files against it.
"""

from __future__ import annotations

import ast
import re
import shlex
import sys
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

# Requirement files a repository keeps its tests' own dependencies in, besides its extras.
REQUIREMENT_FILES = (
    "tests/requirements.txt",
    "tests/requirements-test.txt",
    "requirements-test.txt",
    "requirements-tests.txt",
    "test-requirements.txt",
    "requirements/test.txt",
    "requirements/tests.txt",
)
# Distributions whose import name is not their own name (when they are not installed here to ask).
IMPORT_NAMES = {
    "yaml": "pyyaml",
    "PIL": "pillow",
    "cv2": "opencv-python",
    "sklearn": "scikit-learn",
    "attr": "attrs",
    "dateutil": "python-dateutil",
    "google": "protobuf",
    "Crypto": "pycryptodome",
    "jwt": "pyjwt",
    "git": "gitpython",
    "serial": "pyserial",
    "skimage": "scikit-image",
}
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
SKIPPED_FOLDERS = {".git", ".venv", "venv", "node_modules", "__pycache__", "build", "dist"}


@dataclass(frozen=True)
class Declared:
    """What `pyproject.toml` declares: the name, the dependencies and each extra's."""

    name: str
    dependencies: tuple[str, ...]
    extras: dict[str, tuple[str, ...]]

    @classmethod
    def read(cls, root: Path) -> Declared:
        pyproject = root / "pyproject.toml"
        data = tomllib.loads(pyproject.read_text("utf-8")) if pyproject.is_file() else {}
        project = data.get("project", {})
        extras = project.get("optional-dependencies", {})
        return cls(
            project.get("name", root.resolve().name),
            tuple(project.get("dependencies", ())),
            {extra: tuple(requirements) for extra, requirements in extras.items()},
        )


def normalized(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(lines) -> set[str]:
    """The distributions a list of requirement lines names (options, files and URLs left out)."""
    names = set()
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-") and "://" not in line:
            found = REQUIREMENT.match(line)
            if found:
                names.add(normalized(found[1]))
    return names


def has_submodules(root: Path) -> bool:
    gitmodules = root / ".gitmodules"
    return gitmodules.is_file() and "[submodule" in gitmodules.read_text("utf-8", "replace")


def uses_lfs(root: Path) -> bool:
    """Whether a ``.gitattributes`` (at the root or below) sends files through Git LFS."""
    return any(
        "filter=lfs" in path.read_text("utf-8", "replace")
        for path in _files(root, ".gitattributes")
    )


def requirement_file(root: Path) -> str | None:
    """The repository's requirement file for its tests (repository-relative), if it has one."""
    return next((name for name in REQUIREMENT_FILES if (root / name).is_file()), None)


def imports_of(root: Path, area: str) -> set[str]:
    """The top-level modules the area's Python files (and the conftests above them) import
    that are neither the standard library nor the repository's own."""
    folder = root / area.split("::")[0]
    files = list(_files(folder, "*.py")) if folder.is_dir() else [folder]
    files += [parent / "conftest.py" for parent in folder.parents if parent.is_relative_to(root)]
    found = set()
    for path in files:
        if not path.is_file() or not path.resolve().is_relative_to(root.resolve()):
            continue
        try:
            tree = ast.parse(path.read_text("utf-8", "replace"))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"__future__"} - own_modules(root, area)


def own_modules(root: Path, area: str) -> set[str]:
    """Names the repository itself provides: the modules and packages at its root, in src/, in
    the folders of pytest's ``pythonpath``, and in every folder of the test area (test files
    import their helpers by bare name)."""
    folder = root / area.split("::")[0]
    folders = [root, root / "src", *_pythonpath(root), root / "tests", folder, folder.parent]
    folders += [p for p in folder.rglob("*") if p.is_dir()] if folder.is_dir() else []
    names = set()
    for folder in folders:
        if folder.is_dir():
            names |= {p.stem for p in folder.glob("*.py")}
            names |= {p.name for p in folder.iterdir() if p.is_dir() and _package(p)}
    return names


def _package(folder: Path) -> bool:
    return (folder / "__init__.py").is_file() or any(folder.glob("*.py"))


def _pythonpath(root: Path) -> list[Path]:
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        return []
    options = tomllib.loads(pyproject.read_text("utf-8")).get("tool", {}).get("pytest", {})
    entries = options.get("ini_options", {}).get("pythonpath", [])
    return [root / entry for entry in ([entries] if isinstance(entries, str) else entries)]


def _files(folder: Path, pattern: str):
    for path in folder.rglob(pattern):
        if not SKIPPED_FOLDERS & set(path.relative_to(folder).parts):
            yield path


def provided(module: str, declared: set[str]) -> bool:
    """Whether installing the ``declared`` distributions (normalized names) gives ``module``:
    by its name, by what the distributions installed here say they provide, or through
    their own requirements as installed here."""
    wanted = {normalized(module), normalized(IMPORT_NAMES.get(module, module))}
    wanted |= {normalized(dist) for dist in _module_distributions().get(module, ())}
    return bool(wanted & _closure(frozenset(declared)))


@cache
def _module_distributions() -> dict[str, list[str]]:
    return metadata.packages_distributions()


@cache
def _closure(declared: frozenset[str]) -> set[str]:
    """``declared`` and, for those installed here, everything they require (no extras)."""
    seen, todo = set(), list(declared)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue
        todo += requirement_names(r for r in requires if "extra ==" not in r)
    return seen


def installed_by(root: Path, project: Declared, extras, install_lines, lock) -> set[str]:
    """The distributions a stage job's setup installs (normalized names): the project's
    dependencies and ``extras``, the requirement files and names of its install commands
    (``pip install -r FILE``, ``pip install NAME``), and its lock."""
    names = requirement_names(project.dependencies)
    for extra in extras:
        names |= requirement_names(project.extras.get(extra, ()))
    files = [lock] if lock else []
    for line in install_lines:
        words = shlex.split(line)
        if "install" not in words:
            continue
        after = words[words.index("install") + 1 :]
        files += [
            after[i + 1] for i, word in enumerate(after[:-1]) if word in ("-r", "--requirement")
        ]
        names |= requirement_names(w for w in after if not w.startswith("-") and w not in files)
    for file in files:
        path = root / file
        if path.is_file():
            names |= requirement_names(path.read_text("utf-8", "replace").splitlines())
    return names


@dataclass(frozen=True)
class Installs:
    """What `bot init` has the stage jobs install beyond the project with its test extra."""

    install: tuple[str, ...]  # every stage's commands after the project
    extras: dict[str, tuple[str, ...]]  # area -> the further extras its tests' imports need
    missing: dict[str, tuple[str, ...]]  # area -> the imports no extra or requirement file lists


def plan_installs(
    root: Path, declared: Declared, test_extra: str | None, imports: dict[str, set[str]]
) -> Installs:
    """The installs that give each area (-> the modules its tests import) what it imports: the
    tests' requirement file for all (and pytest when nothing else brings it), an extra for an
    area whose import only that extra lists; what nothing lists is ``missing``."""
    requirements = requirement_file(root)
    install = [f"python -m pip install --quiet -r {requirements}"] if requirements else []
    first = [test_extra] if test_extra else []
    if not provided("pytest", installed_by(root, declared, first, install, None)):
        install.append("python -m pip install --quiet pytest")
    extras_of, missing = {}, {}
    for area, modules in imports.items():
        extras, wanted = list(first), []
        for module in sorted(modules):
            if provided(module, installed_by(root, declared, extras, install, None)):
                continue
            extra = next(
                (
                    name
                    for name, listed in declared.extras.items()
                    if provided(module, requirement_names(listed))
                ),
                None,
            )
            if extra is None:
                wanted.append(module)
            elif extra not in extras:
                extras.append(extra)
        if extras[len(first) :]:
            extras_of[area] = tuple(extras[len(first) :])
        if wanted:
            missing[area] = tuple(wanted)
    return Installs(tuple(install), extras_of, missing)


def unmet_needs(root: Path, *, submodules: bool, lfs: bool, families) -> list[tuple[str, str]]:
    """(what a stage job would lack, the fix) for the repository at ``root``, given whether its
    stage jobs check out submodules and LFS files and the catalog's ``families``."""
    settings = ".github/stagebot-init.yml"
    problems = []
    if has_submodules(root) and not submodules:
        problems.append(
            (
                ".gitmodules lists submodules, but the stage jobs check out without them",
                f"add `submodules: true` to {settings}, then `bot init --write`",
            )
        )
    if uses_lfs(root) and not lfs:
        problems.append(
            (
                ".gitattributes sends files through Git LFS, but the stage jobs check out "
                "only their pointers",
                f"add `lfs: true` to {settings}, then `bot init --write`",
            )
        )
    declared = Declared.read(root)
    for family in families:
        setup = family.setup
        have = installed_by(root, declared, setup.extras, setup.install, setup.lock)
        for suite in family.suites:
            if suite.builtin:
                continue
            missing = sorted(m for m in imports_of(root, suite.path) if not provided(m, have))
            if missing:
                extras = f"[{', '.join(setup.extras)}]" if setup.extras else "none"
                problems.append(
                    (
                        f"{family.name}: {suite.path} imports {', '.join(missing)}, which its "
                        f"setup does not install (extras: {extras})",
                        "add the distribution to an extra the family installs (its setup's "
                        "extras) or to its setup's install, in the catalog",
                    )
                )
    return problems
