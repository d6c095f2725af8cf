"""Static import closure vs coverage, as the ``files`` part of the dependency key: which one
re-runs fewer tests, and does the static one miss a file the test really executes?

Run from the repository root, after tests/bench/replay_reuse.py (it reads the replayed commits):
    python tests/bench/coverage_vs_static.py [--commits 130] TEST_FILE ...

For each test file it records, in a pytest run at the working tree, every repository file whose
Python code runs in the pytest process (a ``sys.setprofile`` hook: file granularity, what
coverage-based selection such as pytest-testmon keys on; child processes are not seen). Then over
the last ``--commits`` commits of main it counts the commits at which each way's inputs changed
(the static key's ``files``, read at the working tree; the recorded files), and lists the
recorded files the static key leaves out (a static miss would be an escaped regression).
Imported as a pytest plugin (``-p coverage_vs_static``) it is the recorder.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORD_ENV = "STAGEBOT_RECORD_CALLS"
_seen: set[str] = set()


def _profile(frame, event, arg):  # noqa: ARG001 (the profile hook's signature)
    if event == "call":
        _seen.add(frame.f_code.co_filename)


def pytest_configure(config) -> None:  # noqa: ARG001
    if os.environ.get(RECORD_ENV):
        threading.setprofile(_profile)
        sys.setprofile(_profile)


def pytest_unconfigure(config) -> None:  # noqa: ARG001
    target = os.environ.get(RECORD_ENV)
    if target:
        sys.setprofile(None)
        threading.setprofile(None)
        root = str(ROOT) + os.sep
        recorder = str(Path(__file__).resolve())
        paths = sorted({p[len(root) :] for p in _seen if p.startswith(root) and p != recorder})
        Path(target).write_text(json.dumps(paths))


def record(test_file: str) -> set[str]:
    with tempfile.TemporaryDirectory() as scratch:
        target = Path(scratch, "calls.json")
        env = {
            **os.environ,
            RECORD_ENV: str(target),
            "PYTHONPATH": f"{Path(__file__).parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        }
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                test_file,
                "-q",
                "-p",
                "coverage_vs_static",
                "-p",
                "no:cacheprovider",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            timeout=1200,
        )
        return set(json.loads(target.read_text())) if target.exists() else set()


def main() -> None:
    from stagebot.harness.reuse.dependency_key import Repository, TestInputs

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commits", type=int, default=130)
    parser.add_argument("tests", nargs="+")
    args = parser.parse_args()
    chain = subprocess.run(
        [
            "git",
            "-C",
            str(ROOT),
            "rev-list",
            "--first-parent",
            f"--max-count={args.commits + 1}",
            "main",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    changes = [
        set(
            subprocess.run(
                ["git", "-C", str(ROOT), "diff", "--name-only", parent, commit],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.split()
        )
        for commit, parent in zip(chain, chain[1:], strict=False)
    ]
    repo = Repository(ROOT)
    print(
        "| test file | static files | recorded files | commits re-run: static | : coverage |"
        " recorded but not in the static key |"
    )
    print("|---|---|---|---|---|---|")
    totals = [0, 0]
    for test_file in args.tests:
        inputs = TestInputs.read(repo, test_file)
        static = set(inputs.files)
        covered = record(test_file) | {test_file}
        runs = [sum(bool(c & static) for c in changes), sum(bool(c & covered) for c in changes)]
        totals = [t + r for t, r in zip(totals, runs, strict=True)]
        missed = sorted(covered - static) if not inputs.conservative else ["(conservative)"]
        print(
            f"| {test_file} | {len(static)} | {len(covered)} | {runs[0]} | {runs[1]} |"
            f" {', '.join(missed) or 'none'} |"
        )
    print(f"| total over {len(changes)} commits | | | {totals[0]} | {totals[1]} | |")


if __name__ == "__main__":
    main()
