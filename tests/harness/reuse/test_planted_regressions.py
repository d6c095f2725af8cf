"""Planted regressions against reuse by key, played as real pipelines (issue 46).

A sample repository (tests/helpers/planted.py) passes on main; then each kind of regression, one
input changed alone (each checked with plain pytest to fail exactly its test: the last test
here), is played as the next commit on main and as a PR against main, with `bot run`: its test
must run and fail, never be reused by key. A docs-only commit, on main and as a PR, must reuse
at least 90% of the tests (the root conftest loads an env file with ``os.environ.setdefault``,
which once switched reuse off), so the plays above cannot pass by a key that always changes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.botrun import results
from helpers.key_reuse import reused, run
from helpers.planted import KINDS, TESTS, Kind, build

pytestmark = pytest.mark.slow
WHERE = {"main": ("--branch", "main"), "PR": ("--pr", "7", "--branch", "feature")}


@pytest.fixture(scope="module")
def passed_on_main(tmp_path_factory) -> Path:
    """The sample repository and a ledger in which main's pipeline #1 passed every test."""
    tmp = tmp_path_factory.mktemp("planted")
    build(tmp / "repo")
    done, out = run(tmp, "base", *WHERE["main"])
    assert done.returncode == 0, done.stdout + done.stderr
    outcomes = _outcomes(out)
    assert len(outcomes) == len(TESTS) and set(outcomes.values()) == {"passed"}, outcomes
    return tmp


def _outcomes(out: Path) -> dict[str, str]:
    return {t["test_id"]: t["outcome"] for r in results(out).values() for t in r["tests"]}


def _play(base: Path, tmp: Path, kind: Kind | None, where: str):
    """``kind`` planted in a copy of ``base`` (None: a docs-only change), run as pipeline #2
    on main or as a PR."""
    shutil.copytree(base / "repo", tmp / "repo", symlinks=True)
    shutil.copy(base / "catalog.yaml", tmp / "catalog.yaml")
    shutil.copy(base / "ledger.sqlite", tmp / "ledger.sqlite")
    env = kind.apply(tmp / "repo") if kind is not None else {}
    if kind is None:
        (tmp / "repo" / "docs" / "guide.md").write_text("How to shop, revised.\n")
    done, out = run(tmp, "next", *WHERE[where], env=env)
    return done, _outcomes(out), reused(tmp, 2)


@pytest.mark.parametrize("where", list(WHERE))
@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_a_planted_regression_runs_and_fails(passed_on_main, tmp_path, kind, where) -> None:
    done, outcomes, by_key = _play(passed_on_main, tmp_path, kind, where)
    name = kind.test.split("::")[1]
    assert name not in by_key, f"escaped: {kind.test} reused by key from #{by_key.get(name)}"
    assert outcomes.get(kind.test) == "failed", (outcomes, done.stdout[-2000:])
    assert done.returncode != 0


@pytest.mark.parametrize("where", list(WHERE))
def test_a_docs_only_commit_reuses_nine_tests_in_ten(passed_on_main, tmp_path, where) -> None:
    """The negative control of the plays above: nothing a test reads changed, so (nearly) every
    test is reused; the tests that run are those whose keys are conservative."""
    done, outcomes, by_key = _play(passed_on_main, tmp_path, None, where)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(by_key) >= 0.9 * len(TESTS), (len(by_key), sorted(outcomes))


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_each_kind_fails_its_test_under_plain_pytest(tmp_path, kind) -> None:
    root = build(tmp_path / "repo")
    env = {**os.environ, **kind.apply(root)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rf", "-p", "no:randomly", "-p", "no:xdist"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    failed = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("FAILED")]
    assert failed == [kind.test], done.stdout[-3000:]


def test_the_plays_cover_twenty_kinds_and_the_issues_eight() -> None:
    assert len(KINDS) >= 20 and len({k.name for k in KINDS}) == len(KINDS)
    assert sum(k.issue for k in KINDS) == 8
