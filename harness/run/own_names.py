"""stagebot's code folders are ``stagebot.<folder>`` and never their bare names.

The repository's top-level folders (``bot``, ``stages``, ``harness``, ``kernels``, ``templates``)
are installed as sub-packages of the ``stagebot`` namespace. Their bare names belong to whatever
distribution of that name is installed (Hugging Face's ``kernels``, which transformers imports,
is common in ML environments). Two things would hand a bare name to our folder instead:

- the folder that holds them (the checkout's root, or ``site-packages/stagebot``) on
  ``sys.path``: ``python -m`` from the root puts it first, pytest-xdist's workers insert their
  working directory, and pytest's ``prepend`` import mode inserts the first folder above a test
  file's package chain;
- pytest importing one of our test files or conftests by a name it derives from the folders
  (``harness.suites.sharding_ir.conftest``), which registers ``harness`` itself in
  ``sys.modules``, whatever the import mode.

The pytest plug-in closes both for every pytest process in an environment with stagebot
installed (shards, the test command, xdist workers): it drops that folder from ``sys.path``
before any test code loads (`drop_package_root`), and imports our test modules and conftests by
their ``stagebot.`` names (`canonical_name`). Of the interpreters such a process starts,
multiprocessing's spawn children take its ``sys.path``; `keep_children_off` takes the folder
out of ``PYTHONPATH`` (xdist's workers put their working directory there, for their children);
and a forkserver, which Python 3.11 starts as ``python -c`` in the working directory without the
parent's ``sys.path``, preloads `FORKSERVER_FIRST` before anything else. An adopting
repository's own folders are not ours: its root stays on ``sys.path`` wherever its pytest (or
``python -m``) would put it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# setup.py's CODE_FOLDERS (tests/harness/run/test_own_names.py checks they agree)
CODE_FOLDERS = ("bot", "stages", "harness", "kernels", "templates")
# the folder holding the code folders: the checkout (editable install) or site-packages/stagebot
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
# the module a forkserver preloads first (multiprocessing's set_forkserver_preload)
FORKSERVER_FIRST = "stagebot.harness.run.forkserver_first"


def is_package_root(entry: str) -> bool:
    """A ``sys.path`` entry (``""`` is the working directory) that is the package root."""
    try:
        return Path(entry or os.getcwd()).resolve() == PACKAGE_ROOT
    except OSError:  # a working directory that was removed
        return False


def drop_package_root(path: list[str] | None = None) -> list[str]:
    """Removes the package root from ``path`` (``sys.path``) in place; returns what it removed."""
    path = sys.path if path is None else path
    dropped = [entry for entry in path if is_package_root(entry)]
    path[:] = [entry for entry in path if entry not in dropped]
    return dropped


def canonical_name(path: Path) -> str | None:
    """The ``stagebot.`` module name of a Python file in a code folder, else None."""
    try:
        relative = path.resolve().relative_to(PACKAGE_ROOT)
    except ValueError:
        return None
    if relative.parts[0] not in CODE_FOLDERS or relative.suffix != ".py":
        return None
    parts = relative.with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(("stagebot", *parts))


def child_environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` for an interpreter this process starts: ``PYTHONPATH`` without the package
    root."""
    if "PYTHONPATH" not in env:
        return dict(env)
    kept = [e for e in env["PYTHONPATH"].split(os.pathsep) if e and not is_package_root(e)]
    return {**env, "PYTHONPATH": os.pathsep.join(kept)}


def keep_children_off() -> None:
    """This process's ``PYTHONPATH`` as `child_environment` has it, for its children."""
    if "PYTHONPATH" in os.environ:
        os.environ["PYTHONPATH"] = child_environment(dict(os.environ))["PYTHONPATH"]
