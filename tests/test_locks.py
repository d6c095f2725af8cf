"""The install locks (templates/locks/<name>.txt, written by `bash .ci/lock`) pin, with hashes,
a version of every requirement of the extras they lock that pyproject.toml still admits, and
never torch (it goes in first, at the machine's build). A lock left behind by an edit of
pyproject.toml fails here, and so does a doctored one (the negative controls)."""

from __future__ import annotations

import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from workflow_installs import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
LOCKS = {
    "core": (),
    "harness": ("harness",),
    "kernels": ("harness", "kernels"),
    "dev": ("harness", "kernels", "test"),
}
PIN = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)==(?P<version>\S+)")
ENVIRONMENT = {"python_version": "3.11", "sys_platform": "linux", "platform_machine": "x86_64"}


def requirements(extras: tuple[str, ...]) -> list[Requirement]:
    texts = PYPROJECT["dependencies"] + [
        text for extra in extras for text in PYPROJECT["optional-dependencies"][extra]
    ]
    return [Requirement(text) for text in texts]


def pins(text: str) -> dict[str, tuple[str, int]]:
    """name -> (version, how many hashes) of a lock's text."""
    found: dict[str, tuple[str, int]] = {}
    name = None
    for line in text.splitlines():
        if match := PIN.match(line):
            name = canonicalize_name(match["name"])
            found[name] = (match["version"], 0)
        elif name and line.strip().startswith("--hash=sha256:"):
            version, hashes = found[name]
            found[name] = (version, hashes + 1)
    return found


def lock_problems(text: str, extras: tuple[str, ...]) -> list[str]:
    pinned = pins(text)
    problems = [f"{name}=={version} has no hash" for name, (version, n) in pinned.items() if not n]
    if "torch" in pinned:
        problems.append("torch is pinned: it goes in first, at the machine's build")
    for requirement in requirements(extras):
        name = canonicalize_name(requirement.name)
        if name == "torch" or (requirement.marker and not requirement.marker.evaluate(ENVIRONMENT)):
            continue
        if name not in pinned:
            problems.append(f"{requirement} is not pinned")
        elif not requirement.specifier.contains(pinned[name][0], prereleases=True):
            problems.append(f"{name}=={pinned[name][0]} is outside {requirement}")
    return problems


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_each_lock_pins_what_pyproject_asks_for(lock: str) -> None:
    text = (ROOT / "templates" / "locks" / f"{lock}.txt").read_text(encoding="utf-8")
    assert lock_problems(text, LOCKS[lock]) == [], "refresh the locks: bash .ci/lock"


def test_a_doctored_lock_is_caught() -> None:
    text = (ROOT / "templates" / "locks" / "harness.txt").read_text(encoding="utf-8")
    without = re.sub(r"(?m)^transformers==.*\n(    --hash=.*\n)*", "", text)
    assert lock_problems(without, LOCKS["harness"]) == ["transformers<6,>=5 is not pinned"]
    moved = re.sub(r"(?m)^transformers==\S+", "transformers==4.57.0", text)
    assert lock_problems(moved, LOCKS["harness"]) == [
        "transformers==4.57.0 is outside transformers<6,>=5"
    ]
    unhashed = re.sub(r"(?m)^(click==\S+) \\\n(    --hash=.*\n)*", r"\1\n", text)
    assert lock_problems(unhashed, LOCKS["harness"])[0].endswith("has no hash")
    assert lock_problems(text + "torch==2.13.0 \\\n    --hash=sha256:00\n", LOCKS["harness"]) == [
        "torch is pinned: it goes in first, at the machine's build"
    ]


def test_the_build_lock_pins_the_build_requirements_with_hashes() -> None:
    """The workflows build the checkout without build isolation (an isolated build fetches
    ``[build-system] requires`` unhashed): the build lock pins exactly those, with hashes."""
    build = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["build-system"]
    text = (ROOT / "templates" / "locks" / "build.txt").read_text(encoding="utf-8")
    pinned = pins(text)
    wanted = [Requirement(text) for text in build["requires"]]
    assert set(pinned) == {canonicalize_name(r.name) for r in wanted}
    for requirement in wanted:
        version, hashes = pinned[canonicalize_name(requirement.name)]
        assert hashes and requirement.specifier.contains(version), (requirement, version)
