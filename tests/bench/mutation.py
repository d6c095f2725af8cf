"""Mutation testing: how many one-line bugs planted in the orchestration code the tests miss.

Run from the repository root (takes hours on two cores; it resumes where it stopped):
    python tests/bench/mutation.py [--target NAME ...] [--budget-s SECONDS] [--work DIR]
After adding tests for the survivors, ``--rerun-survivors`` runs just those again.

Tool: cosmic-ray. It mutates a module's file on disk, runs a test command, and restores the file,
so it works with this project's ``package-dir`` mapping (``stagebot.bot`` is the folder ``bot/``);
mutmut 3 instead copies sources into ``mutants/`` and derives module names from the paths there
(``bot.comments.grammar``), which never match the ``stagebot.*`` imports. To leave the working tree
alone, the tracked files are copied into ``--work`` and imported from there through a ``stagebot``
folder of symbolic links put first on PYTHONPATH (ahead of the editable install's finder).

Each target mutates some modules and runs only the tests that exercise them (``-x``: the first
failure kills the mutant), so one mutant costs one short pytest run. Sessions live in ``--work``:
a run cut by ``--budget-s`` (or a kill) resumes on the next call. It prints, per target, mutants
done / total and the survivors (file:line and the mutation), then the total surviving count.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import shlex
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE_FOLDERS = ("bot", "stages", "harness", "kernels", "templates")
PYTEST = f"{sys.executable} -m pytest -x -q -p no:cacheprovider"
# name -> (modules to mutate, pytest arguments: the tests that exercise them, in run order)
TARGETS = {
    # test_real_torch_assert_close_message imports torch (seconds) and checks evidence.py only.
    "analysis": (
        ["harness/analysis/classify.py"],
        ["tests/harness/analysis/test_analysis.py", "-k", "not real_torch"],
    ),
    "grammar": (["bot/comments/grammar.py"], ["tests/bot/comments/test_grammar.py"]),
    "ledger": (["harness/ledger"], ["tests/harness/ledger/test_ledger.py"]),
    "stages": (
        ["stages"],
        ["tests/stages/test_catalog.py", "tests/stages/test_planner.py", "tests/test_contracts.py"],
    ),
}


def copy_tree(work: Path) -> Path:
    """The tracked (and untracked, not ignored) files into work/tree (and work/pristine, to undo
    a mutation that a cut run left behind), with the import shim."""
    tree = work / "tree"
    if tree.exists():
        return tree
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        text=True,
    ).stdout.split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            for copy in (tree / name, work / "pristine" / name):
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, copy)
    shim = work / "shim" / "stagebot"
    shim.mkdir(parents=True, exist_ok=True)
    for folder in CODE_FOLDERS:
        (shim / folder).symlink_to(tree / folder, target_is_directory=True)
    return tree


def config(work: Path, name: str, timeout_s: float) -> Path:
    modules, tests = TARGETS[name]
    path = work / f"{name}.toml"
    lines = [
        "[cosmic-ray]",
        f"module-path = {json.dumps(modules)}",
        f"timeout = {timeout_s}",
        "excluded-modules = []",
        f"test-command = {json.dumps(PYTEST + ' ' + shlex.join(tests))}",
        "",
        "[cosmic-ray.distributor]",
        'name = "local"',
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def skip_equivalent(session: Path, tree: Path) -> None:
    """Mark skipped the mutants that cannot change behaviour, so the surviving count counts only
    real gaps: those inside type annotations (never evaluated under ``from __future__ import
    annotations``: ``int | None`` -> ``int - None``) and ``==`` -> ``is`` (the strings compared
    here are interned literals, so identity and equality agree)."""
    from cosmic_ray.work_db import use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    spans: dict[str, list[tuple[tuple[int, int], tuple[int, int]]]] = {}
    with use_db(str(session)) as db:
        skipped = []
        for item in db.work_items:
            for mutation in item.mutations:
                module = str(mutation.module_path)
                if module not in spans:
                    spans[module] = annotation_spans((tree / module).read_text())
                start = tuple(mutation.start_pos)
                identity = mutation.operator_name.endswith(("_Is", "_IsNot"))
                if identity or any(low <= start < high for low, high in spans[module]):
                    skipped.append(item.job_id)
        if skipped:
            db.set_multiple_results(
                skipped,
                WorkResult(output="equivalent", worker_outcome=WorkerOutcome.SKIPPED),
            )


def keep_sample(session: Path, size: int) -> None:
    """Skip all but ``size`` pending mutants, drawn at random with a fixed seed."""
    from cosmic_ray.work_db import use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    with use_db(str(session)) as db:
        pending = sorted(item.job_id for item in db.pending_work_items)
        dropped = pending[:]
        for job_id in random.Random(0).sample(pending, min(size, len(pending))):
            dropped.remove(job_id)
        if dropped:
            db.set_multiple_results(
                dropped, WorkResult(output="not sampled", worker_outcome=WorkerOutcome.SKIPPED)
            )


def annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(line, column) start and end of every annotation in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            annotation = node.returns
        elif isinstance(node, ast.arg | ast.AnnAssign):
            annotation = node.annotation
        else:
            continue
        if annotation is not None:
            found.append(
                (
                    (annotation.lineno, annotation.col_offset),
                    (annotation.end_lineno, annotation.end_col_offset),
                )
            )
    return found


def cosmic(*args: str, cwd: Path, env: dict[str, str], timeout: float | None = None):
    command = [sys.executable, "-m", "cosmic_ray.cli", *args]
    return subprocess.run(
        command, cwd=cwd, env=env, timeout=timeout, capture_output=True, text=True
    )


def survivors(session: Path) -> tuple[int, int, int, list[str]]:
    """(run, skipped, total, survivors) from a session's database (`cosmic-ray dump`)."""
    dumped = subprocess.run(
        [sys.executable, "-m", "cosmic_ray.cli", "dump", str(session)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    run = skipped = total = 0
    alive = []
    for line in filter(None, dumped.splitlines()):
        item, result = json.loads(line)
        total += 1
        if result is None:
            continue
        if result.get("worker_outcome") == "skipped":
            skipped += 1
            continue
        run += 1
        if result.get("test_outcome") == "survived":
            for mutation in item["mutations"]:
                where = f"{mutation['module_path']}:{mutation['start_pos'][0]}"
                alive.append(f"{where} {mutation['operator_name']} #{mutation['occurrence']}")
    return run, skipped, total, alive


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", action="append", choices=sorted(TARGETS))
    parser.add_argument("--work", type=Path, default=ROOT / "out" / "mutation")
    parser.add_argument("--budget-s", type=float, default=None, help="stop after this long")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="per mutant")
    parser.add_argument(
        "--sample",
        type=int,
        default=None,
        help="run only this many mutants per target, drawn at random (seed 0); the rest are "
        "skipped as not sampled",
    )
    parser.add_argument(
        "--rerun-survivors",
        action="store_true",
        help="after adding tests (the mutated code unchanged): copy tests/ again and run the "
        "survivors once more",
    )
    args = parser.parse_args()
    args.work = args.work.resolve()
    args.work.mkdir(parents=True, exist_ok=True)
    tree = copy_tree(args.work)
    env = {**os.environ, "PYTHONPATH": str(args.work / "shim")}
    deadline = time.monotonic() + args.budget_s if args.budget_s else None
    total_alive = 0
    complete = True
    for name in args.target or list(TARGETS):
        session = args.work / f"{name}.sqlite"
        cfg = config(args.work, name, args.timeout_s)
        if not session.exists():
            cosmic("init", str(cfg), str(session), cwd=tree, env=env).check_returncode()
            skip_equivalent(session, tree)
            if args.sample is not None:
                keep_sample(session, args.sample)
        elif args.rerun_survivors:
            shutil.copytree(ROOT / "tests", tree / "tests", dirs_exist_ok=True)
            with sqlite3.connect(session) as db:  # pending again: `exec` runs them
                db.execute("DELETE FROM work_results WHERE test_outcome = 'SURVIVED'")
        left = None if deadline is None else deadline - time.monotonic()
        if left is None or left > 0:
            try:
                cosmic("exec", str(cfg), str(session), cwd=tree, env=env, timeout=left)
            except subprocess.TimeoutExpired:
                pass  # the session keeps what finished; the next call resumes
        # A cut run can leave a mutated file behind: put the original back.
        pristine = args.work / "pristine"
        for module in TARGETS[name][0]:
            for path in (
                [pristine / module] if module.endswith(".py") else (pristine / module).rglob("*.py")
            ):
                shutil.copy2(path, tree / path.relative_to(pristine))
        run, skipped, total, alive = survivors(session)
        complete &= run + skipped == total
        total_alive += len(alive)
        print(
            f"{name}: {run}/{total - skipped} mutants run ({skipped} skipped: equivalent or not "
            "sampled), "
            f"{len(alive)} survived"
        )
        for line in alive:
            print(f"  {line}")
    state = "complete" if complete else "partial (run again to resume)"
    print(f"surviving mutants: {total_alive} ({state})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
