"""The mutation gate's configuration holds together (tests/mutation, docs/mutation.md): CI runs
it, it gates the critical modules of issue 50, each with tests that exist, every explained
survivor names a line the module still has and says why, and a module's fingerprint moves with
its source and its tests (so a change is mutated again)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
from helpers.files import write_tree
from workflow_installs import ROOT

MUTATION = ROOT / "tests" / "mutation"
CRITICAL = {
    "bot/comments/sha_pin.py",
    "bot/comments/authz.py",
    "bot/custody/trust.py",
    "bot/custody/files.py",
    "harness/reuse/policy.py",
    "harness/ledger/keys.py",
    "harness/reuse/dependency_key.py",
    "harness/reuse/import_graph.py",
    "harness/reuse/pytest_child.py",
    "harness/analysis/flakiness.py",
    "bot/adopt/doctor_checks.py",
}


@pytest.fixture(scope="module")
def gate():
    spec = importlib.util.spec_from_file_location("mutation_run", MUTATION / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def test_ci_runs_the_gate() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    job = script.split("== job 3", 1)[1]
    assert "python tests/mutation/run.py" in job and "templates/locks/dev.txt" in job


def test_the_critical_modules_are_listed_and_only_they_gate(gate) -> None:
    """Each critical module is in modules.toml with its tests (docs/mutation.md says which are
    not gated yet); nothing else gates CI."""
    targets = gate.targets()
    assert CRITICAL <= targets.keys()
    assert {name for name, target in targets.items() if target.gate} <= CRITICAL
    for target in targets.values():
        assert (ROOT / target.name).exists(), target.name
        files = [arg for arg in target.tests if arg.endswith(".py")]
        assert files and all((ROOT / name).is_file() for name in files), target


def test_every_explained_survivor_names_a_line_its_module_has(gate) -> None:
    listed = gate.targets().keys()
    for entry in gate.equivalents():
        assert entry["module"] in listed, entry
        lines = [line.strip() for line in (ROOT / entry["module"]).read_text().splitlines()]
        assert entry["line"] in lines, f"stale entry (the line changed): {entry}"
        assert len(entry["reason"].split()) >= 5, f"say why it cannot change behaviour: {entry}"


def test_an_entry_without_a_reason_is_refused(gate, tmp_path, monkeypatch) -> None:
    (tmp_path / "equivalent.toml").write_text(
        '[[equivalent]]\nmodule = "m.py"\noperator = "op"\ncolumn = 0\nline = "x"\nreason = ""\n'
    )
    monkeypatch.setattr(gate, "HERE", tmp_path)
    with pytest.raises(SystemExit, match="lacks a reason"):
        gate.equivalents()


def test_clean_records_are_of_gated_modules() -> None:
    path = MUTATION / "clean.json"
    clean = json.loads(path.read_text()) if path.exists() else {}
    modules = tomllib.loads((MUTATION / "modules.toml").read_text())["modules"]
    assert all(modules.get(name, {}).get("gate") for name in clean), clean


def test_a_fingerprint_moves_with_the_module_its_tests_and_its_explanations(
    gate, tmp_path, monkeypatch
) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "m.py").write_text("X = 1\n")
    (tmp_path / "tests" / "test_m.py").write_text("def test_x(): pass\n")
    monkeypatch.setattr(gate, "ROOT", tmp_path)
    target = gate.Target("m.py", ("tests/test_m.py",), True)
    first = gate.fingerprint(target, [])
    assert gate.fingerprint(target, []) == first
    entry = {"module": "m.py", "operator": "op", "column": 0, "line": "X = 1", "reason": "r"}
    assert gate.fingerprint(target, [entry]) != first
    assert gate.fingerprint(replace(target, tests=("tests/test_m.py", "-k", "x")), []) != first
    (tmp_path / "tests" / "test_m.py").write_text("def test_x(): assert True\n")
    second = gate.fingerprint(target, [])
    assert second != first
    (tmp_path / "m.py").write_text("X = 2\n")
    assert gate.fingerprint(target, []) != second


def test_a_fingerprint_moves_with_the_helpers_and_conftest_files_its_tests_load(
    gate, tmp_path, monkeypatch
) -> None:
    """A weakened shared helper weakens every test using it: those modules are mutated again;
    a helper no mapped test imports leaves the record alone."""
    write_tree(
        tmp_path,
        {
            "m.py": "X = 1\n",
            "tests/conftest.py": "",
            "tests/helpers/__init__.py": "",
            "tests/helpers/used.py": "def check(x):\n    assert x\n",
            "tests/helpers/unused.py": "",
            "tests/unit/test_m.py": "from helpers.used import check\n\ncheck(1)\n",
        },
    )
    monkeypatch.setattr(gate, "ROOT", tmp_path)
    target = gate.Target("m.py", ("tests/unit/test_m.py",), True)
    before = gate.fingerprint(target, [])
    (tmp_path / "tests/helpers/unused.py").write_text("# changed\n")
    assert gate.fingerprint(target, []) == before
    for changed in ("tests/helpers/used.py", "tests/conftest.py"):
        (tmp_path / changed).write_text("def check(x):\n    pass\n")
        assert gate.fingerprint(target, []) != before, changed
        before = gate.fingerprint(target, [])


def test_a_fingerprint_moves_with_the_projects_pytest_options_only(
    gate, tmp_path, monkeypatch
) -> None:
    """``addopts`` can deselect a module's tests without touching a test file: the record
    follows pyproject.toml's pytest options, and only them (not a dependency's pin)."""
    project = '[project]\ndependencies = ["a"]\n\n[tool.pytest.ini_options]\naddopts = "-ra"\n'
    write_tree(tmp_path, {"m.py": "X = 1\n", "tests/test_m.py": "", "pyproject.toml": project})
    monkeypatch.setattr(gate, "ROOT", tmp_path)
    target = gate.Target("m.py", ("tests/test_m.py",), True)
    before = gate.fingerprint(target, [])
    (tmp_path / "pyproject.toml").write_text(project.replace('["a"]', '["a", "b"]'))
    assert gate.fingerprint(target, []) == before
    (tmp_path / "pyproject.toml").write_text(project.replace('"-ra"', '"-ra -k not_m"'))
    assert gate.fingerprint(target, []) != before


def _tiny_repository(root: Path) -> None:
    """A git repository with one module, ``m.py``, and a test that checks only one of its two
    functions: every mutant of ``negated`` survives, ``truth``'s is killed."""
    (root / "tests" / "mutation").mkdir(parents=True)
    (root / "m.py").write_text(
        "def truth():\n    return True\n\n\ndef negated(x):\n    return -x\n"
    )
    (root / "tests" / "test_m.py").write_text(
        "import os\n\nfrom m import negated, truth\n\n\n"
        "def test_truth():\n    assert truth() is True\n\n\n"
        "def test_negated_runs():  # and says which worker's tree ran it\n"
        "    negated(1)\n"
        "    with open(os.environ['SEEN'], 'a') as seen:\n        print(os.getcwd(), file=seen)\n"
    )
    (root / "pytest.ini").write_text("[pytest]\npythonpath = .\n")  # m from the tree copy
    profile = MUTATION / "mutation_profile.py"
    (root / "tests" / "mutation" / profile.name).write_bytes(profile.read_bytes())
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)


@pytest.mark.slow
def test_a_module_is_spread_over_the_workers_and_its_survivors_fail_the_gate(
    gate, tmp_path, monkeypatch
) -> None:
    """The gate end to end on a tiny repository, two HTTP workers: each worker tests mutants;
    a weakly tested function's mutants survive and fail the gate (the negative control), the
    tested one's are killed, and the working tree is left unmutated."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _tiny_repository(repo)
    monkeypatch.setattr(gate, "ROOT", repo)
    monkeypatch.delenv("PYTEST_ADDOPTS")  # the suite's, without hypothesis's plugin (conftest)
    monkeypatch.setenv("SEEN", str(tmp_path / "seen"))
    target = gate.Target("m.py", ("tests/test_m.py",), True)
    [outcome] = gate.run_all([target], {"m.py": "p"}, tmp_path / "work", 2, 60.0, [])
    assert outcome.error is None
    assert outcome.killed >= 1 and outcome.unexplained
    assert {m.text for m in outcome.unexplained} == {"return -x"}
    assert gate.report(outcome) is True
    trees = {str(tmp_path / "work" / worker / "tree") for worker in ("worker-0", "worker-1")}
    assert set((tmp_path / "seen").read_text().split()) == trees
    for worker in ("worker-0", "worker-1"):  # every mutation undone
        assert (tmp_path / "work" / worker / "tree" / "m.py").read_text() == (
            repo / "m.py"
        ).read_text()


def test_a_mutant_whose_worker_failed_is_an_error_never_a_kill(gate, tmp_path) -> None:
    """cosmic-ray counts any result that is not "survived" as killed, a crashed worker's too;
    the gate must not: those tests never ran."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import (
        MutationSpec,
        TestOutcome,
        WorkerOutcome,
        WorkItem,
        WorkResult,
    )

    (tmp_path / "m.py").write_text("X = 1 + 2\n")
    session = tmp_path / "session.sqlite"
    results = {
        "killed": WorkResult(WorkerOutcome.NORMAL, "", TestOutcome.KILLED),
        "crashed": WorkResult(WorkerOutcome.ABNORMAL, "connection refused"),
    }
    with use_db(str(session), WorkDB.Mode.create) as db:
        for index, (job, result) in enumerate(results.items()):
            spec = MutationSpec("m.py", "core/NumberReplacer", index, (1, 4), (1, 5))
            db.add_work_item(WorkItem.single(job, spec))
            db.set_result(job, result)
    target = gate.Target("m.py", ("tests/test_m.py",), True)
    outcome = gate.sort_mutants(target, session, tmp_path, [])
    assert outcome.killed == 1 and outcome.broken == 1
    assert outcome.error and "1 mutants' workers failed" in outcome.error
    assert "connection refused" in outcome.error
    assert gate.report(outcome) is True
