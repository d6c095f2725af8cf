"""stagebot's own suites (harness/suites/<name>: sharding_ir, nvfp4_moe), which a catalog in any
repository runs by name: ``suites: [{builtin: sharding_ir, args: [...]}]``.

A built-in suite is a folder of the installed stagebot package, not of the repository, so it is
named by its path under the package (``harness/suites/<name>``, as in stagebot's own catalog) and
found where the stage job's stagebot is installed only when the shard runs (`installed`). Its
tests run with that package as pytest's root, so their ids are the ones stagebot's own
pipelines record (``harness/suites/sharding_ir/test_….py::…``). A family that runs one installs
the dependencies of stagebot's ``[harness]`` extra (transformers, pytest …) from stagebot's lock:
`setup()`.
"""

from __future__ import annotations

import shlex
from importlib.metadata import requires
from pathlib import Path

from stagebot.stages.setup import Setup

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the stagebot package (or checkout)
SUITES = Path("harness") / "suites"


def names() -> list[str]:
    """The built-in suites: the packages under harness/suites/."""
    folder = PACKAGE_ROOT / SUITES
    return sorted(p.name for p in folder.iterdir() if (p / "__init__.py").is_file())


def suite_path(name: str) -> str:
    """The suite's path under the stagebot package; ValueError names the known suites."""
    known = names()
    if name not in known:
        raise ValueError(f"unknown builtin suite {name!r} (known: {', '.join(known)})")
    return (SUITES / name).as_posix()


def installed(path: str) -> Path:
    """Where a built-in suite's path is in the stagebot installed here."""
    return PACKAGE_ROOT / path


def setup() -> Setup:
    """What a family that runs a built-in suite installs besides the project: the
    dependencies of stagebot's [harness] extra, from its lock (pinned, with hashes) as the
    stagebot installed on the runner ships it, and torch where the runner lacks it (the lock
    leaves it to the runner's build)."""
    (torch,) = [
        text.split(";")[0].strip()
        for text in requires("stagebot") or ()
        if text.startswith("torch") and 'extra == "harness"' in text
    ]
    return Setup(
        install=(f"python -m pip install --quiet {shlex.quote(torch)}",), stagebot_lock="harness"
    )
