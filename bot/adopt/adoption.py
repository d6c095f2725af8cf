"""`bot init`'s work: what a repository holds (its package, test areas, GPU-marked tests), the files
that adopt stagebot there, and how each differs from what is on disk.

Files are of two kinds. The settings, `.github/stagebot.yml` and the catalog are the
repository's own once written: `bot init` creates them when absent and never rewrites them (the
settings' stagebot pin excepted, when `--stagebot-wheel` names a new one). The three workflows
are generated from the settings every time (bot/adopt/workflows.py), so re-running `bot init`
shows exactly what a new stagebot version or changed settings would change.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from stagebot.bot.adopt.needs import (
    Declared,
    has_submodules,
    imports_of,
    plan_installs,
    requirement_names,
    unmet_needs,
    uses_lfs,
)
from stagebot.bot.adopt.workflows import (
    SETTINGS_PATH,
    InitError,
    InitSettings,
    Pin,
    check,
    load_settings,
    render_workflows,
)
from stagebot.bot.config import DEFAULT_PATH as CONFIG_PATH
from stagebot.bot.config import BotConfig, load_config
from stagebot.stages.catalog import load_catalog
from stagebot.stages.names import BACKENDS

CATALOG_DIR = Path(".github/stagebot/catalog")
TEST_EXTRAS = ("test", "tests", "testing", "dev")  # the first the project has is installed
GPU_MARK = re.compile(r"pytest\.mark\.gpu\b|@mark\.gpu\b")
WHEEL_NAME = re.compile(r"^stagebot-(?P<version>[^-]+)-")
GPU_TYPE = "DGX_H200"  # the one GPU type the generated catalog declares; edit it to yours


@dataclass(frozen=True)
class Project:
    name: str
    test_extra: str | None
    areas: dict[str, bool]  # test folder (repository-relative) -> holds a GPU-marked test
    backend: str = "Python"  # the stage names' backend word: what the tests are written for
    install: tuple[str, ...] = ()  # what every stage runs after installing the project
    area_extras: dict[str, tuple[str, ...]] = field(default_factory=dict)  # beyond test_extra
    missing: dict[str, tuple[str, ...]] = field(default_factory=dict)  # area -> unprovided imports
    submodules: bool = False
    lfs: bool = False


@dataclass(frozen=True)
class Change:
    path: Path
    old: str | None  # None: the file does not exist
    new: str

    @property
    def state(self) -> str:
        return "create" if self.old is None else "unchanged" if self.old == self.new else "update"

    def diff(self) -> str:
        return "".join(
            difflib.unified_diff(
                (self.old or "").splitlines(keepends=True),
                self.new.splitlines(keepends=True),
                f"a/{self.path}",
                f"b/{self.path}",
            )
        )


def detect(root: Path) -> Project:
    """The project's name and test extra (pyproject.toml), its test areas (each folder under
    tests/ that holds test files, or tests/ itself when its files are at the top) and what the
    stage jobs need to run them (bot/adopt/needs.py)."""
    declared = Declared.read(root)
    tests = root / "tests"
    if not tests.is_dir():
        raise InitError(f"{root}: no tests/ folder; stagebot's stages run a repository's tests")
    areas = {}
    top = sorted(tests.glob("test_*.py"))
    if top:
        areas["tests"] = _gpu_marked(top)
    for folder in sorted(p for p in tests.iterdir() if p.is_dir() and not p.name.startswith(".")):
        files = sorted(folder.rglob("test_*.py"))
        if files:
            areas[f"tests/{folder.name}"] = _gpu_marked(files)
    if not areas:
        raise InitError(f"{tests}: no test_*.py files; write a test first")
    test_extra = next((extra for extra in TEST_EXTRAS if extra in declared.extras), None)
    imports = {area: imports_of(root, area) for area in areas}
    installs = plan_installs(root, declared, test_extra, imports)
    uses = set().union(*imports.values()) | requirement_names(declared.dependencies)
    return Project(
        declared.name,
        test_extra,
        areas,
        backend="PyTorch" if {"torch", "pytorch"} & uses else "Python",
        install=installs.install,
        area_extras=installs.extras,
        missing=installs.missing,
        submodules=has_submodules(root),
        lfs=uses_lfs(root),
    )


def _gpu_marked(files: list[Path]) -> bool:
    return any(GPU_MARK.search(path.read_text("utf-8", errors="replace")) for path in files)


def pin_wheel(wheel: Path, local: bool) -> Pin:
    """The pin of a stagebot wheel: its version and sha256; ``local``: install that very file
    (tests, mirrors) rather than ``stagebot==<version>`` from the index."""
    found = WHEEL_NAME.match(wheel.name)
    if not wheel.is_file() or not found:
        raise InitError(f"--stagebot-wheel {wheel}: not a stagebot wheel file (stagebot-X-….whl)")
    sha256 = hashlib.sha256(wheel.read_bytes()).hexdigest()
    version = found["version"]
    return Pin(False, version, sha256, str(wheel.resolve()) if local else f"stagebot=={version}")


def family_name(area: str, gpu: bool, backend: str) -> str:
    name = Path(area).name
    tag = "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", name) if part)
    return f"{GPU_TYPE if gpu else 'CPU'}-{backend}-{tag}"


def catalog_files(project: Project) -> dict[str, str]:
    """The catalog's fragments: GPU types, one stage family per test area (a GPU one besides for
    an area with GPU-marked tests), and an empty waives file."""
    gpus = f"""\
# GPU types (stagebot's catalog format: its docs/adopt.md). runner_labels are what a
# stage job asks for: register runners with these labels (ephemeral ones for GPUs: stage jobs
# run PR code), then `bot doctor` checks they are online.
gpu_types:
  CPU:
    device_names: []
    runner_labels: [ubuntu-latest]
  {GPU_TYPE}:
    arch: sm_90a
    device_names: ["NVIDIA H200", "NVIDIA H200 *"]
    runner_labels: [self-hosted, linux, ephemeral, gpu-dgx-h200]
"""
    extras = f"[{project.test_extra}]" if project.test_extra else "[]"
    install = f"\n  install: {json.dumps(list(project.install))}" if project.install else ""
    families = []
    for area, gpu in project.areas.items():
        # tests/ as an area holds its top-level files only: its folders are areas of their own
        ignore = [f"--ignore={a}" for a in project.areas if a != "tests"] if area == "tests" else []
        cpu_marks = "not gpu" if gpu else None
        more = project.area_extras.get(area, ())
        name = family_name(area, False, project.backend)
        families.append(_family(name, area, cpu_marks, ignore, more))
        if gpu:
            others = [_area_files(other) for other in project.areas if other != area]
            skip = ["**/*.md", "docs/**", *others]
            name = family_name(area, True, project.backend)
            families.append(_family(name, area, "gpu", ignore, more, skip))
    stages = f"""\
# Stage families: one per test area of {project.name} (a GPU one where an area has tests marked
# gpu). A plain `/bot run` runs them all, except that a GPU stage skips a pull request that
# changes only docs or other areas' tests (skip_if_only_changed; naming the stage runs it).
# Names: <GPU type>-<backend>-<Area>, the backend word one of
# {", ".join(BACKENDS)}. To rename a family, edit its name here (keep the GPU type
# first); its stages are the name with -1, -2, … (what /bot run --stage-list, the waives and
# the reports say), and results recorded under the old name are not reused for the new one.
# Setup: what each stage job installs (the project with these extras, then the commands); a
# family's own setup adds to it.
setup:
  extras: {extras}{install}

families:
{"".join(families)}"""
    waives = "# Waived tests: one per line, `[full:<GPU>/]<test id> SKIP (<bug link or reason>)`.\n"
    return {"gpus.yaml": gpus, "stages.yaml": stages, "waives.txt": waives}


def _family(
    name: str,
    area: str,
    marks: str | None,
    args: list[str],
    extras: tuple[str, ...],
    skip: list[str] | None = None,
) -> str:
    mark = f", marks: {marks!r}" if marks else ""
    mark += f", args: {json.dumps(args)}" if args else ""
    rule = f"    skip_if_only_changed: {json.dumps(skip)}\n" if skip else ""
    setup = f"    setup: {{extras: {json.dumps(list(extras))}}}\n" if extras else ""
    return (
        f"  - name: {name}\n    kind: test\n    timeout_minutes: 30\n"
        f"    suites: [{{path: {area}{mark}}}]\n{rule}{setup}"
    )


def _area_files(area: str) -> str:
    """The path pattern of an area's own files: its folder, or tests/'s top-level test files."""
    return "tests/test_*.py" if area == "tests" else f"{area}/**"


CONFIG_TEXT = """\
# stagebot's settings for this repository (every key optional; its docs/github.md "Settings").
status_context: stagebot
stage_branch: stagebot-stage
"""


def plan_files(root: Path, pin: Pin | None) -> list[Change]:
    """Every file `bot init` writes in ``root``, with what is there now."""
    settings_file = root / SETTINGS_PATH
    files: dict[Path, str] = {}
    if settings_file.exists():
        settings = load_settings(settings_file)
        if pin is not None and pin != settings.stagebot:
            settings = replace(settings, stagebot=pin)
            files[SETTINGS_PATH] = settings.to_yaml()
    else:
        if pin is None:
            raise InitError(
                "no .github/stagebot-init.yml yet: give --stagebot-wheel FILE (the release to "
                "pin: `pip download --no-deps stagebot==VERSION -d DIR`)"
            )
        project = detect(root)
        settings = InitSettings(
            pin,
            _default_branch(root),
            catalog=str(CATALOG_DIR),
            submodules=project.submodules,
            lfs=project.lfs,
        )
        check(settings, "bot init")
        files[SETTINGS_PATH] = settings.to_yaml()
        if not (root / CONFIG_PATH).exists():
            files[CONFIG_PATH] = CONFIG_TEXT
        if not (root / CATALOG_DIR).exists():
            for name, text in catalog_files(project).items():
                files[CATALOG_DIR / name] = text
    files.update(render_workflows(settings, repo_config(root)))
    return [Change(path, _read(root / path), text) for path, text in files.items()]


def needs_notes(root: Path) -> list[str]:
    """What the stage jobs would lack to run this repository's tests, each with its fix: read
    against the written settings and catalog, else against what `bot init` would write."""
    settings_file = root / SETTINGS_PATH
    if settings_file.exists():
        settings = load_settings(settings_file)
        catalog = load_catalog(root / settings.catalog if settings.catalog else None)
        found = unmet_needs(
            root, submodules=settings.submodules, lfs=settings.lfs, families=catalog.families
        )
        return [f"{problem}: {fix}" for problem, fix in found]
    return [
        f"{area} imports {', '.join(modules)}, which no extra or requirement file of "
        f"{root.resolve().name} lists: add them to the `test` extra (or to setup.install in "
        f"{CATALOG_DIR / 'stages.yaml'})"
        for area, modules in detect(root).missing.items()
    ]


def repo_config(root: Path) -> BotConfig:
    """The repository's `.github/stagebot.yml`, or the defaults when it has none."""
    path = root / CONFIG_PATH
    return load_config(path) if path.exists() else BotConfig()


def _read(path: Path) -> str | None:
    return path.read_text("utf-8") if path.exists() else None


def _default_branch(root: Path) -> str:
    """The checkout's current branch (a fresh clone is on the default one), else main."""
    head = root / ".git" / "HEAD"
    if head.is_file():
        found = re.match(r"ref: refs/heads/(\S+)", head.read_text())
        if found:
            return found[1]
    return "main"


NEXT_STEPS = """\
Next, on GitHub (stagebot's docs/github.md and docs/adopt.md say why; `bot doctor` checks each):
  1. Push these files to {branch}, then create the stage branch from it:
       git push origin {branch}:{stage_branch}
     and protect it with a ruleset (Settings > Rules): only admins (and the bot's App) may
     update it; no deletion.
  2. Register runners with each catalog label (ephemeral, just-in-time for GPUs) in a runner
     group limited to .github/workflows/{stage_workflow}@refs/heads/{stage_branch}.
  3. Install a GitHub App with issues, statuses, actions: write, pull requests, contents:
     read; set vars.STAGEBOT_APP_ID and the secret STAGEBOT_APP_PRIVATE_KEY in an environment
     `stagebot` limited to {branch} (or use the workflows' own token: stagebot's docs/github.md
     says what it costs).
  4. Settings > Actions > General: workflow permissions read-only; require approval for all
     outside contributors' fork pull request workflows.
  5. Require the status `{status_context}` in {branch}'s branch protection or ruleset.
Then run `bot doctor` until it passes, and comment `/bot run` on a pull request."""


def next_steps(root: Path) -> str:
    settings = load_settings(root / SETTINGS_PATH)
    config = repo_config(root)
    return NEXT_STEPS.format(
        branch=settings.default_branch,
        stage_branch=config.stage_branch,
        stage_workflow=config.stage_workflow,
        status_context=config.status_context,
    )
