"""What a stage job installs and sets before it runs its shard, declared in the catalog.

A ``setup`` mapping may stand at a catalog fragment's top level (every stage), on a GPU type
and on a family; the three merge in that order: extras add up (the project is installed once,
with all of them), install commands run one after another, and a later ``env`` value replaces
an earlier one. The merged setup travels in the matrix entry, and the stage job runs it with
`bot stage-setup` (no install line is written by hand in a workflow).

```yaml
setup:
  lock: requirements/stage.txt  # first: pip install -r it (pinned, with hashes)
  extras: [kernels]             # pip install '.[<all extras>]' in the repository root
  install: ["pip install ninja"] # shell commands run after it, in the repository root
  env: {CUDA_MODULE_LOADING: LAZY} # set for the stage's later steps
```

A ``lock`` (a repository path; a later one replaces an earlier one) goes in before the project,
so the project's install finds its dependencies pinned and adds only what the lock leaves out
(torch, at the runner's build). A family that runs one of stagebot's built-in suites also
installs stagebot's own lock for them (``stagebot_lock``: a name of
``templates/locks/<name>.txt`` in the stagebot installed on the runner).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

EXTRA = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # PEP 685 extra names
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Names a stage may not set: GitHub's own, and those that change how every later program loads.
LOCKS = Path(__file__).resolve().parents[1] / "templates" / "locks"  # stagebot's own locks
RESERVED_ENV = re.compile(r"^(GITHUB_|RUNNER_|ACTIONS_)|^(PATH|HOME|LD_PRELOAD|PYTHONPATH)$")


@dataclass(frozen=True)
class Setup:
    extras: tuple[str, ...] = ()
    install: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # (name, value), in declaration order
    lock: str | None = None  # the project's lock: a repository path
    stagebot_lock: str | None = None  # one of stagebot's locks, for its built-in suites

    def then(self, later: Setup) -> Setup:
        """This setup followed by ``later`` (a GPU type's, then a family's)."""
        env = dict(self.env)
        env.update(later.env)
        return Setup(
            tuple(dict.fromkeys(self.extras + later.extras)),
            self.install + later.install,
            tuple(env.items()),
            later.lock or self.lock,
            later.stagebot_lock or self.stagebot_lock,
        )

    def commands(self) -> list[str]:
        """The shell lines a stage job runs, in order: the locks, the project with its extras,
        then the declared install commands."""
        locks = [stagebot_lock_file(self.stagebot_lock)] if self.stagebot_lock else []
        locks += [self.lock] if self.lock else []
        project = f".[{','.join(self.extras)}]" if self.extras else "."
        return [
            *(f"python -m pip install --quiet -r {shlex.quote(str(lock))}" for lock in locks),
            f"python -m pip install --quiet {shlex.quote(project)}",
            *self.install,
        ]

    def to_json(self) -> dict[str, Any]:
        data = {"extras": list(self.extras), "install": list(self.install), "env": dict(self.env)}
        locks = {"lock": self.lock, "stagebot_lock": self.stagebot_lock}
        return {**data, **{key: value for key, value in locks.items() if value}}


def stagebot_locks() -> list[str]:
    """The names of stagebot's own locks (templates/locks/<name>.txt, `bash .ci/lock`)."""
    return sorted(path.stem for path in LOCKS.glob("*.txt"))


def stagebot_lock_file(name: str) -> Path:
    """Where stagebot's lock ``name`` is in the stagebot installed here."""
    return LOCKS / f"{name}.txt"


def check_setup(data: dict[str, Any]) -> Setup:
    """A validated setup (a catalog's, or a matrix entry's: data from the plan run); ValueError
    says what is wrong and what would be right."""
    if not isinstance(data, dict) or not all(
        isinstance(item, str) for key in ("extras", "install") for item in (data.get(key) or ())
    ):
        raise ValueError("setup must be a mapping of extras and install (lists of strings), env")
    extras = tuple(data.get("extras") or ())
    for extra in extras:
        if not EXTRA.match(extra):
            raise ValueError(f"setup extra {extra!r} is not an extra name such as kernels")
    env_data = data.get("env") or {}
    if not isinstance(env_data, dict):
        raise ValueError("setup env must be a mapping of names to values")
    env = tuple((str(k), str(v)) for k, v in env_data.items())
    for name, value in env:
        if not ENV_NAME.match(name) or RESERVED_ENV.search(name):
            raise ValueError(
                f"setup env {name!r} is not a name a stage may set (letters, digits, _; not "
                "PATH, HOME, LD_PRELOAD, PYTHONPATH or GITHUB_/RUNNER_/ACTIONS_ names)"
            )
        if "\n" in value or "\r" in value:
            raise ValueError(f"setup env {name}: a value must be one line")
    lock = data.get("lock")
    if lock is not None and (
        not isinstance(lock, str) or PurePosixPath(lock).is_absolute() or ".." in lock.split("/")
    ):
        raise ValueError(
            f"setup lock {lock!r} must be a path inside the repository, such as "
            "requirements/stage.txt"
        )
    stagebot_lock = data.get("stagebot_lock")
    if stagebot_lock is not None and stagebot_lock not in stagebot_locks():
        raise ValueError(
            f"setup stagebot_lock {stagebot_lock!r} is not one of stagebot's locks: "
            f"{', '.join(stagebot_locks())}"
        )
    return Setup(extras, tuple(data.get("install") or ()), env, lock, stagebot_lock)
