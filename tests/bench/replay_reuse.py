"""Replay reuse by dependency key over this repository's own history (docs/reuse.md has the table).

Run from the repository root (about 25 minutes on a busy two-core machine; the keys are kept in
``--work`` and reused by the next run):
    python tests/bench/replay_reuse.py [--commits 120] [--rebases 6] [--check 4] [--work DIR]

For each of the last ``--commits`` commits of main's first-parent chain (oldest first) it computes
the dependency key (``harness/reuse/dependency_key.py``) of every CPU test file (tests/ and the
harness suites that CPU-PyTorch runs), in the CPU-PyTorch family, from that commit's own tree and
catalog. A test is *reused by key* when an earlier commit of the replay ran it with the same key;
today's same-commit reuse re-runs every test on a new commit. The first commit only fills the store.

Synthetic rebases: main commit C (parent P) is taken as a PR branch made at an older main commit
O (C's change applied onto O's tree, O the oldest of 10, 6, 3 or 2 commits back that it applies
to) and then rebased onto P, which gives C's tree. The rebased commit may reuse main's results
up to P and the PR's own results from before the rebase.

``--check N``: does the real run agree? For N reused test files (``check`` says which) it runs
plain pytest on the reusing commit's tree and on the tree of the commit whose run the key
reuses, and compares each test's outcome: a test reused as passed that fails in the real run is
an escaped regression (each tree is imported through a ``stagebot`` folder of links first on
PYTHONPATH, as tests/mutation/run.py does).
"""

from __future__ import annotations

import argparse
import ast
import functools
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from stagebot.harness.reuse.dependency_key import (  # noqa: E402
    Repository,
    current_environment,
    dependency_key,
)
from stagebot.harness.run.junit import read_junit  # noqa: E402
from stagebot.stages.catalog import load_catalog  # noqa: E402

FAMILY = "CPU-PyTorch"
TEST_ROOTS = ("tests/", "harness/suites/")
GROUPS = (  # (table title, test files under)
    ("CPU-PyTorch stage: the harness suites (harness/suites/)", "harness/suites/"),
    ("the project's own tests (tests/, run by ci.yml)", "tests/"),
)
CORE_FOLDERS = ("harness/", "kernels/")
CODE_FOLDERS = ("bot", "stages", "harness", "kernels", "templates")


def git(*args: str, **kwargs) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True, **kwargs
    ).stdout


def extract(tree_ish: str, folder: Path) -> Path:
    if not folder.exists():
        folder.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", tree_ish],
            check=True,
            capture_output=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(folder, filter="data")
    return folder


def test_files(repo: Repository) -> list[str]:
    return [
        path
        for path in repo.files
        if path.startswith(TEST_ROOTS)
        and path.rsplit("/", 1)[-1].startswith("test_")
        and path.endswith(".py")
        and "/fixtures/" not in path
    ]


def count_tests(path: Path) -> int:
    return _count_tests(path.read_text(errors="replace"))


@functools.lru_cache(maxsize=1024)
def _count_tests(source: str) -> int:
    """Test functions (module level and in Test classes); parametrized ids count once."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return 1
    count = 0
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
            "test"
        ):
            count += 1
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            count += sum(
                isinstance(n, ast.FunctionDef) and n.name.startswith("test") for n in node.body
            )
    return max(count, 1)


def keys_of(folder: Path, environment) -> dict[str, list]:
    """Test file -> [key digest, conservative, test count] for one tree."""
    repo = Repository(folder)
    try:
        catalog = load_catalog(folder / "stages" / "catalog")
        family = next(f for f in catalog.families if f.name == FAMILY)
        waives = catalog.waives
    except Exception as error:  # an old catalog today's loader refuses: every key is new
        print(f"  {folder.name[:10]}: catalog not loadable ({type(error).__name__}): all new")
        return {
            path: [f"new-{folder.name}-{path}", True, count_tests(folder / path)]
            for path in test_files(repo)
        }
    found = {}
    for path in test_files(repo):
        key = dependency_key(repo, path, family, environment, waives)
        found[path] = [key.digest, bool(key.conservative), count_tests(folder / path)]
    return found


def touches_core(commit: str) -> bool:
    changed = git("diff", "--name-only", f"{commit}^", commit).split()
    return any(path.startswith(CORE_FOLDERS) for path in changed)


def applied_on(commit: str, base: str, work: Path) -> str | None:
    """The tree of ``commit``'s change applied onto ``base`` (None when it does not apply)."""
    index = work / "index.tmp"
    env = {**os.environ, "GIT_INDEX_FILE": str(index)}
    try:
        git("read-tree", base, env=env)
        patch = git("diff", "--binary", f"{commit}^", commit)
        subprocess.run(
            ["git", "-C", str(ROOT), "apply", "--cached", "--3way"],
            input=patch,
            check=True,
            capture_output=True,
            text=True,
            env=env,
        )
        return git("write-tree", env=env).strip()
    except subprocess.CalledProcessError:
        return None
    finally:
        index.unlink(missing_ok=True)


def replay(commits: list[str], work: Path, environment) -> dict[str, dict[str, list]]:
    cache = work / "keys.json"
    keys: dict[str, dict[str, list]] = json.loads(cache.read_text()) if cache.exists() else {}
    for number, commit in enumerate(commits, 1):
        if commit not in keys:
            folder = extract(commit, work / "trees" / commit)
            keys[commit] = keys_of(folder, environment)
            cache.write_text(json.dumps(keys))
            shutil.rmtree(folder)
            print(f"  {number}/{len(commits)} {commit[:10]}: {len(keys[commit])} test files")
    return keys


def saved(rows: list[tuple[dict[str, list], set[str]]], prefix: str) -> tuple[int, ...]:
    """(test files, tests, tests run by key, test files run by key, conservative keys) over the
    test files under ``prefix``; today's same-commit reuse runs every test of a new commit."""
    files = tests = by_key = files_by_key = conservative = 0
    for found, store in rows:
        for path, (digest, blind, count) in found.items():
            if not path.startswith(prefix):
                continue
            files += 1
            tests += count
            conservative += blind
            if digest not in store:
                by_key += count
                files_by_key += 1
    return files, tests, by_key, files_by_key, conservative


def line(name: str, commits: int, figures: tuple[int, ...]) -> str:
    files, tests, by_key, files_by_key, conservative = figures
    percent = 100 * (tests - by_key) / tests if tests else 0.0
    return (
        f"| {name} | {commits} | {files} | {tests} | {by_key} | {percent:.1f}% |"
        f" {files_by_key} | {conservative} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commits", type=int, default=120)
    parser.add_argument("--rebases", type=int, default=6)
    parser.add_argument("--check", type=int, default=0)
    parser.add_argument("--work", type=Path, default=ROOT / "out" / "replay")
    parser.add_argument("--branch", default="main")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    environment = current_environment()
    chain = git("rev-list", "--first-parent", f"--max-count={args.commits}", args.branch).split()
    commits = chain[::-1]
    print(
        f"replaying {len(commits)} commits of {args.branch} ({commits[0][:10]}..{commits[-1][:10]})"
    )
    keys = replay(commits, args.work, environment)

    store: set[str] = set()
    source: dict[str, str] = {}  # key digest -> the first commit that ran it
    all_rows, plain_rows, core_rows = [], [], []
    reused_at: list[tuple[str, str, str]] = []  # (commit, test file, source commit)
    for index, commit in enumerate(commits):
        found = keys[commit]
        if index:
            row = (found, set(store))
            all_rows.append(row)
            (core_rows if touches_core(commit) else plain_rows).append(row)
            reused_at += [
                (commit, path, source[d]) for path, (d, blind, _) in found.items() if d in store
            ]
        for digest, *_ in found.values():
            source.setdefault(digest, commit)
        store |= {digest for digest, *_ in found.values()}

    rebase_main, rebase_pr = [], []
    step = max(1, (len(commits) - 10) // (args.rebases + 1))
    for index in range(len(commits) - 1, 10, -step):
        if len(rebase_main) == args.rebases:
            break
        commit, parent = commits[index], commits[index - 1]
        for back in (10, 6, 3, 2):  # the oldest base the change still applies to
            old = commits[index - back]
            tree = applied_on(commit, old, args.work)
            if tree is not None:
                break
        if tree is None:
            continue
        folder = extract(tree, args.work / "trees" / f"rebase-{commit}")
        before = keys_of(folder, environment)
        shutil.rmtree(folder)
        main_store = {d for c in commits[:index] for d, *_ in keys[c].values()}
        rebase_main.append((keys[commit], main_store))
        rebase_pr.append((keys[commit], main_store | {d for d, *_ in before.values()}))
        print(f"  rebase: {commit[:10]} made on {old[:10]}, rebased onto {parent[:10]}")

    sets = [
        ("main, all", all_rows),
        ("main, not touching harness/ or kernels/", plain_rows),
        ("main, touching harness/ or kernels/", core_rows),
        ("rebased PR commits, main's results only", rebase_main),
        ("rebased PR commits, + the PR's own before the rebase", rebase_pr),
    ]
    for title, prefix in GROUPS:
        print(f"\n{title}\n")
        print(
            "| commits | n | test files | tests run today (same-commit reuse) | tests run by key"
            " | executions saved | test files run by key | conservative keys |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for name, rows in sets:
            print(line(name, len(rows), saved(rows, prefix)))
    if args.check:
        check(reused_at, keys, commits, args.check, args.work)


def check(reused_at, keys, commits: list[str], samples: int, work: Path) -> None:
    """Run sampled reused test files on both trees and compare their tests' outcomes. The sample:
    keys not made conservative, one per test file and per commit, the longest reuse first (the
    most commits between the run and its reuse), test files of at most 40 test functions."""
    order = {commit: index for index, commit in enumerate(commits)}
    candidates = sorted(
        (
            (order[source] - order[commit], path, source, commit)
            for commit, path, source in reused_at
            if not keys[commit][path][1] and keys[commit][path][2] <= 40
        ),
    )
    picked, seen = [], set()
    for _, path, source, commit in candidates:
        if path not in seen and commit not in seen and len(picked) < samples:
            picked.append((commit, (path, source, None)))
            seen |= {path, commit}
    escaped = disagreements = compared = 0
    for commit, (path, source, _) in picked:
        outcomes = [run_tests(tree, path, work) for tree in (source, commit)]
        for test_id in sorted(outcomes[0].keys() | outcomes[1].keys()):
            before, after = (o.get(test_id, "absent") for o in outcomes)
            compared += 1
            if before != after:
                disagreements += 1
                escaped += before == "passed" and after in ("failed", "error")
                print(f"  DISAGREE {test_id}: {before} at {source[:10]}, {after} at {commit[:10]}")
        counts = [
            ", ".join(f"{n} {o}" for o, n in sorted(Counter(side.values()).items()))
            for side in outcomes
        ]
        print(
            f"  checked {path} at {commit[:10]} ({counts[1]}) against the key's first run at"
            f" {source[:10]} ({counts[0]})"
        )
    print(
        f"agreement check: {compared} test outcomes compared, {disagreements} disagreements, "
        f"{escaped} escaped regressions"
    )


def run_tests(commit: str, path: str, work: Path) -> dict[str, str]:
    """Each test's outcome of ``path`` run with pytest on ``commit``'s tree."""
    folder = extract(commit, work / "trees" / commit)
    shim = folder / ".shim" / "stagebot"
    if not shim.exists():
        shim.mkdir(parents=True)
        for name in CODE_FOLDERS:
            (shim / name).symlink_to(folder / name, target_is_directory=True)
        (shim / "__init__.py").write_text("")
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch, "report.xml")
        # the tree's own pytest plugin, not the installed one (whose module may not exist at
        # that commit, and then the editable install would lend today's to an old tree)
        env = {
            **os.environ,
            "PYTHONPATH": f"{shim.parent}{os.pathsep}{folder / 'tests'}",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        }
        plugins = [arg for module in tree_plugins(folder) for arg in ("-p", module)]
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                path,
                "-q",
                "-p",
                "no:cacheprovider",
                *plugins,
                f"--junitxml={report}",
            ],
            cwd=folder,
            env=env,
            capture_output=True,
            timeout=900,
        )
        cases = read_junit(report) or []
        return {case.test_id: case.outcome for case in cases} or {path: "no result"}


def tree_plugins(folder: Path) -> list[str]:
    """The pytest11 entry points' modules of the tree's pyproject.toml."""
    project = tomllib.loads((folder / "pyproject.toml").read_text())
    entries = project.get("project", {}).get("entry-points", {}).get("pytest11", {})
    return [str(module).split(":")[0] for module in entries.values()]


if __name__ == "__main__":
    main()
