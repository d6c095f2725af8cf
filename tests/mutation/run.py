"""Mutation testing: one-line bugs planted in a module, each run against the module's own tests;
a bug the tests do not notice (a survivor) is a promise nothing pins.

    python tests/mutation/run.py                 # the gate: what CI runs (.ci/run)
    python tests/mutation/run.py --all           # every gated module, whatever changed
    python tests/mutation/run.py --module bot/comments/sha_pin.py [--module ...]
    python tests/mutation/run.py --all --record  # and record the clean modules (commit it)

modules.toml (beside this file) maps each module to the fast tests that pin it, run in order
with ``-x`` (the first failure kills the mutant); ``gate = true`` marks the security- and
soundness-critical modules CI runs. The gate runs each gated module whose fingerprint (its
source, its tests' sources and arguments, the pytest command and the project's pytest options,
cosmic-ray's version, its entries in equivalent.toml) differs from the one clean.json recorded
at its last clean run, one module after another, each module's mutants spread over
``--workers`` copies of the tree (a cosmic-ray HTTP worker in each, fed by cosmic-ray's http
distributor); it fails when a mutant survives that equivalent.toml does not list with its
reason (docs/mutation.md: how to read a survivor). A mutant the tests stop by the per-mutant
timeout counts as killed (a hang is noticed), and is counted apart.

Tool: cosmic-ray. It mutates a module's file on disk, runs a test command, and restores the file,
so it works with this project's ``package-dir`` mapping (``stagebot.bot`` is the folder ``bot/``);
mutmut 3 instead copies sources into ``mutants/`` and derives module names from the paths there
(``bot.comments.grammar``), which never match the ``stagebot.*`` imports. To leave the working
tree alone, the tracked files are copied into ``--work`` (one copy per worker) and imported from
there through a ``stagebot`` folder of symbolic links put first on PYTHONPATH (ahead of the
editable install's finder). Mutants inside type annotations are skipped: under ``from __future__
import annotations`` they are never evaluated. Sessions live in ``--work``: a cut run resumes.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import itertools
import json
import os
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CODE_FOLDERS = ("bot", "stages", "harness", "kernels", "templates")
PYTEST = [
    sys.executable,
    *("-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"),
    *("-p", "mutation_profile", "--hypothesis-profile=mutation"),  # mutation_profile.py
    "--hypothesis-seed=0",  # the same examples every run: a kill is never luck
]
BASETEMP = "STAGEBOT_MUTATION_BASETEMP"  # a worker's pytest --basetemp (mutation_profile.py)
HTTP_LIMIT_S = 300  # aiohttp's default: a mutant's request that takes longer fails, unkilled


@dataclass(frozen=True)
class Target:
    name: str  # a module file (or a folder of them), from the repository root
    tests: tuple[str, ...]  # pytest arguments: the tests that pin it
    gate: bool

    @property
    def slug(self) -> str:
        return self.name.replace("/", "+")


@dataclass(frozen=True)
class Mutant:
    module: str
    operator: str
    line: int
    column: int  # from the line's first non-blank character
    text: str  # the line, stripped
    diff: str

    @property
    def key(self) -> tuple[str, str, int, str]:
        """What equivalent.toml names a mutant by: not the line number, which moves."""
        return (self.module, self.operator, self.column, self.text)

    def entry(self) -> str:
        """The equivalent.toml entry to fill in, should this survivor be equivalent."""
        return (
            f"[[equivalent]]\nmodule = {json.dumps(self.module)}\n"
            f"operator = {json.dumps(self.operator)}\ncolumn = {self.column}\n"
            f'line = {json.dumps(self.text)}\nreason = ""\n'
        )


@dataclass
class Outcome:
    target: Target
    killed: int = 0
    timeout: int = 0
    explained: int = 0
    skipped: int = 0
    broken: int = 0  # mutants whose tests never ran: an error
    seconds: float = 0.0
    error: str | None = None
    unexplained: tuple[Mutant, ...] = ()


def targets() -> dict[str, Target]:
    table = tomllib.loads((HERE / "modules.toml").read_text())["modules"]
    return {
        name: Target(name, tuple(entry["tests"]), bool(entry.get("gate", False)))
        for name, entry in table.items()
    }


def equivalents() -> list[dict]:
    entries = tomllib.loads((HERE / "equivalent.toml").read_text()).get("equivalent", [])
    for entry in entries:
        missing = {"module", "operator", "column", "line", "reason"} - entry.keys()
        if missing or not str(entry.get("reason", "")).strip():
            raise SystemExit(
                f"equivalent.toml: an entry lacks {', '.join(sorted(missing)) or 'a reason'}: "
                f"{entry}"
            )
    return entries


def fingerprint(target: Target, explained: list[dict]) -> str:
    """What a run of ``target`` stands for: the module's source, its tests' sources (with the
    helpers and conftest files they load) and pytest arguments, how each mutant runs (the pytest
    command and profile, the project's pytest options, cosmic-ray's version) and the entries of
    equivalent.toml for it. Change any of it and the module runs again. A session's results
    depend on all but the entries (``explained=[]``): new explanations re-sort its survivors
    without running a mutant again."""
    from importlib.metadata import version

    digest = hashlib.sha256()
    sources = sorted(_sources(target)) + _test_sources(target)
    for name in sources:
        digest.update(f"{name}\0".encode() + (ROOT / name).read_bytes() + b"\0")
    own = [e for e in explained if e["module"] in _sources(target)]
    how = [PYTEST[1:], _pytest_options(), version("cosmic-ray"), target.tests, own]
    digest.update(json.dumps(how, sort_keys=True).encode())
    return digest.hexdigest()


def _pytest_options() -> dict:
    """pyproject.toml's [tool.pytest.ini_options]: every mutant's pytest runs with them
    (``addopts`` and the plugin it loads, ``pythonpath``, the markers), so a change there can
    stop tests from running while their files stay the same."""
    path = ROOT / "pyproject.toml"
    if not path.is_file():
        return {}
    project = tomllib.loads(path.read_text())
    return project.get("tool", {}).get("pytest", {}).get("ini_options", {})


def _sources(target: Target) -> list[str]:
    """The module files ``target`` mutates (a folder: each of its .py files)."""
    path = ROOT / target.name
    if path.is_file():
        return [target.name]
    return sorted(str(p.relative_to(ROOT)) for p in path.rglob("*.py"))


def _test_sources(target: Target) -> list[str]:
    """The files under tests/ a run of ``target``'s tests reads: the mapped test files, the
    conftest.py files pytest loads for them, the mutation profile, and what those import from
    tests/ (the shared helpers), so a weakened helper re-runs the modules whose tests use it."""
    from stagebot.harness.reuse.import_graph import import_closure

    tests = [arg for arg in target.tests if arg.endswith(".py")]
    loaded = {"tests/mutation/mutation_profile.py"}
    loaded |= {str(folder / "conftest.py") for test in tests for folder in Path(test).parents}
    loaded = {name for name in loaded if (ROOT / name).is_file()}
    for name in [*tests, *sorted(loaded)]:
        loaded |= {f for f in import_closure(str(ROOT), name) if f.startswith("tests/")}
    return tests + sorted(loaded - set(tests))


def copy_tree(work: Path) -> Path:
    """The tracked (and untracked, not ignored) files into work/tree, with the import shim
    work/shim."""
    tree = work / "tree"
    if tree.exists():
        shutil.rmtree(tree)
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
            copy = tree / name
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy)
    shim = work / "shim" / "stagebot"
    shim.mkdir(parents=True, exist_ok=True)
    for folder in CODE_FOLDERS:
        link = shim / folder
        if not link.is_symlink():
            link.symlink_to(tree / folder, target_is_directory=True)
    return tree


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


def cosmic(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "cosmic_ray.cli", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)


def run_target(
    target: Target, print_: str, trees: list[Path], urls: list[str], timeout_s: float, explained
) -> Outcome:
    """Mutate ``target`` through the HTTP workers ``urls`` (one per tree copy of ``trees``),
    resuming a session of the same fingerprint without explanations ``print_`` (taken before
    the trees were copied), and sort its mutants."""
    started = time.monotonic()
    tree = trees[0] / "tree"
    command, env = [*PYTEST, *target.tests], worker_env(trees[0])
    # the tests must pass unmutated, or every mutant would count as killed
    baseline = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    if baseline.returncode != 0:
        tail = (baseline.stdout + baseline.stderr)[-2000:]
        return Outcome(target, error=f"its tests fail unmutated:\n{tail}")
    sessions = trees[0].parent / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    session = sessions / f"{target.slug}.sqlite"
    stamp = session.with_suffix(".fingerprint")
    config = sessions / f"{target.slug}.toml"  # this run's: its workers' addresses
    config.write_text(
        "[cosmic-ray]\n"
        f"module-path = {json.dumps(target.name)}\n"
        f"timeout = {timeout_s}\n"
        "excluded-modules = []\n"
        f"test-command = {json.dumps(shlex.join(command))}\n"
        '\n[cosmic-ray.distributor]\nname = "http"\n'
        f"\n[cosmic-ray.distributor.http]\nworker-urls = {json.dumps(urls)}\n"
    )
    if not (session.exists() and stamp.exists() and stamp.read_text() == print_):
        session.unlink(missing_ok=True)
        cosmic("init", str(config), str(session), cwd=tree, env=env).check_returncode()
        _skip_annotations(session, tree)
        stamp.write_text(print_)
    done = cosmic("exec", str(config), str(session), cwd=tree, env=env)
    for copy, module in itertools.product(trees, _sources(target)):
        shutil.copy2(ROOT / module, copy / "tree" / module)  # a cut run may leave a mutation
    if done.returncode != 0:
        return Outcome(target, error=f"cosmic-ray exec failed:\n{done.stderr[-2000:]}")
    outcome = sort_mutants(target, session, tree, explained)
    if outcome.broken:  # the mutants whose tests never ran run again next time
        stamp.unlink()
    outcome.seconds = time.monotonic() - started
    return outcome


def sort_mutants(target: Target, session: Path, tree: Path, explained: list[dict]) -> Outcome:
    """Count ``session``'s mutants of ``target``: killed, explained, skipped, survivors; a mutant
    whose tests never ran (its worker failed, or could not apply it) or that never ran makes the
    module's run an error, never a kill."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome

    outcome = Outcome(target)
    known = {(e["module"], e["operator"], e["column"], e["line"]) for e in explained}
    unexplained, broken = [], []
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                outcome.skipped += 1
            elif result.worker_outcome not in (WorkerOutcome.NORMAL, WorkerOutcome.SKIPPED):
                broken.append(result.output or "")
            elif result.is_killed:
                outcome.killed += 1
                outcome.timeout += result.output == "timeout"
            else:
                mutant = _mutant(item.mutations[0], tree, result.diff or "")
                if mutant.key in known:
                    outcome.explained += 1
                else:
                    unexplained.append(mutant)
        pending = db.num_work_items - db.num_results
    outcome.broken = len(broken)
    if broken:
        outcome.error = f"{len(broken)} mutants' workers failed; the first:\n{broken[0][-2000:]}"
    elif pending:
        outcome.error = f"{pending} mutants did not run"
    outcome.unexplained = tuple(unexplained)
    return outcome


def worker_env(work: Path) -> dict[str, str]:
    """The environment of the tests in ``work``'s tree copy: stagebot imported from that copy,
    its temporary folders apart from every other worker's (mutation_profile.py)."""
    path = [str(work / "shim"), str(work / "tree" / "tests" / "mutation")]
    path += filter(None, [os.environ.get("PYTHONPATH")])
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(path),
        "PYTHONDONTWRITEBYTECODE": "1",
        BASETEMP: str(scratch(work)),
    }


@contextlib.contextmanager
def http_workers(trees: list[Path]):
    """A cosmic-ray HTTP worker in each of ``trees``' copies, for as long as the block runs;
    yields their URLs. cosmic-ray's http distributor hands each a mutant as it frees up, so a
    module's mutants spread over every worker."""
    workers = []
    try:
        for work in trees:
            workers.append(_start_worker(work))
        for worker in workers:
            _wait_listening(*worker)
        yield [f"http://127.0.0.1:{port}" for _, port, _ in workers]
    finally:
        for process, _, _ in workers:
            process.terminate()
        for process, _, _ in workers:
            process.wait()


def _start_worker(work: Path) -> tuple[subprocess.Popen, int, Path]:
    with socket.socket() as probe:  # a free port, for the worker to take
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = work / "worker.log"
    command = [sys.executable, "-m", "cosmic_ray.cli", "http-worker", "--port", str(port)]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=work / "tree", env=worker_env(work), stdout=out, stderr=subprocess.STDOUT
        )
    return process, port, log


def _wait_listening(process: subprocess.Popen, port: int, log: Path, limit_s: float = 60) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(
                f"a cosmic-ray worker exited ({process.returncode}): {log.read_text()}"
            )
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"a cosmic-ray worker did not listen on port {port} in {limit_s:.0f} s: {log}")


def scratch(work: Path) -> Path:
    """The tests' temporary folders (pytest's --basetemp) for the worker ``work``: in memory
    where /dev/shm is, since the ledger's tests write SQLite files that sync to disk, which
    costs a loaded machine ten times the tests' own time."""
    memory = Path("/dev/shm")
    if memory.is_dir() and os.access(memory, os.W_OK):
        return memory / f"stagebot-mutation-{os.getpid()}-{work.name}"
    return work / "tmp"


def _skip_annotations(session: Path, tree: Path) -> None:
    from cosmic_ray.work_db import use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    spans: dict[str, list] = {}
    with use_db(str(session)) as db:
        skipped = []
        for item in db.work_items:
            for mutation in item.mutations:
                module = str(mutation.module_path)
                if module not in spans:
                    spans[module] = annotation_spans((tree / module).read_text())
                start = tuple(mutation.start_pos)
                if any(low <= start < high for low, high in spans[module]):
                    skipped.append(item.job_id)
        if skipped:
            db.set_multiple_results(
                skipped,
                WorkResult(output="in an annotation", worker_outcome=WorkerOutcome.SKIPPED),
            )


def _mutant(mutation, tree: Path, diff: str) -> Mutant:
    module = str(mutation.module_path)
    line_no, column = mutation.start_pos
    line = (tree / module).read_text().splitlines()[line_no - 1]
    indent = len(line) - len(line.lstrip())
    return Mutant(module, mutation.operator_name, line_no, column - indent, line.strip(), diff)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--module", action="append", help="run this modules.toml entry")
    parser.add_argument("--all", action="store_true", help="every gated module, changed or not")
    parser.add_argument("--record", action="store_true", help="record clean modules in clean.json")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--timeout-s", type=float, default=120.0,
        help=f"per mutant, below {HTTP_LIMIT_S} (the HTTP distributor's request limit)",
    )  # fmt: skip
    parser.add_argument("--work", type=Path, default=ROOT / "out" / "mutation")
    args = parser.parse_args()
    if not 0 < args.timeout_s < HTTP_LIMIT_S:
        parser.error(f"--timeout-s {args.timeout_s:g}: give more than 0, less than {HTTP_LIMIT_S}")
    # a stop (CI's timeout) unwinds: the HTTP workers are stopped, not left running
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    table, explained = targets(), equivalents()
    clean_path = HERE / "clean.json"
    clean = json.loads(clean_path.read_text()) if clean_path.exists() else {}
    if args.module:
        unknown = sorted(set(args.module) - table.keys())
        if unknown:
            parser.error(f"not in modules.toml: {', '.join(unknown)} (it has {', '.join(table)})")
        chosen = [table[name] for name in args.module]
    else:
        chosen = [t for t in table.values() if t.gate]
    todo = []
    for target in chosen:
        if args.all or args.module or clean.get(target.name) != fingerprint(target, explained):
            todo.append(target)
        else:
            print(f"{target.name}: unchanged since its clean run (clean.json), not run")
    started = time.monotonic()
    # what is tested, taken before anything runs: the sessions', and the records'
    sessions = {target.name: fingerprint(target, []) for target in todo}
    prints = {target.name: fingerprint(target, explained) for target in todo}
    outcomes = run_all(todo, sessions, args.work.resolve(), args.workers, args.timeout_s, explained)
    failed = False
    for outcome in outcomes:
        failed |= report(outcome)
        if args.record and outcome.target.gate and not outcome.error and not outcome.unexplained:
            clean[outcome.target.name] = prints[outcome.target.name]
    if args.record:
        clean_path.write_text(json.dumps(dict(sorted(clean.items())), indent=2) + "\n")
    totals = [sum(getattr(o, f) for o in outcomes) for f in ("killed", "timeout", "explained")]
    survivors = sum(len(o.unexplained) for o in outcomes)
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        f"mutation: {len(outcomes)} module(s) in {time.monotonic() - started:.0f} s "
        f"({used.ru_utime + used.ru_stime:.0f} s of CPU): "
        f"{totals[0]} killed ({totals[1]} by the timeout), {totals[2]} survived with a reason "
        f"(equivalent.toml), {survivors} survived without one"
    )
    return 1 if failed else 0


def run_all(todo: list[Target], prints, work: Path, workers: int, timeout_s: float, explained):
    """``todo`` one module after another, each spread over ``workers`` copies of the tree."""
    if not todo:
        return []
    trees = [work / f"worker-{index}" for index in range(max(1, workers))]
    for folder in trees:
        copy_tree(folder)
    try:
        with http_workers(trees) as urls:
            outcomes = [
                run_target(target, prints[target.name], trees, urls, timeout_s, explained)
                for target in todo
            ]
    finally:
        for folder in trees:
            shutil.rmtree(scratch(folder), ignore_errors=True)
    return sorted(outcomes, key=lambda o: o.target.name)


def report(outcome: Outcome) -> bool:
    """Print one module's counts and survivors; True when it fails the gate."""
    name = outcome.target.name
    if outcome.error:
        print(f"{name}: FAILED: {outcome.error}")
        return True
    print(
        f"{name}: {outcome.killed} killed ({outcome.timeout} by the timeout), "
        f"{outcome.explained} survived with a reason, {len(outcome.unexplained)} without, "
        f"{outcome.skipped} skipped (in annotations), {outcome.seconds:.0f} s"
    )
    for mutant in outcome.unexplained:
        print(f"  survived: {mutant.module}:{mutant.line} {mutant.operator}\n{mutant.diff}")
        print("  if it cannot change behaviour, add to tests/mutation/equivalent.toml:")
        print("    " + mutant.entry().replace("\n", "\n    "))
    return bool(outcome.unexplained)


if __name__ == "__main__":
    sys.exit(main())
