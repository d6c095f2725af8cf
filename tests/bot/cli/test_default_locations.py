"""Without --ledger and --out, a repository's ledger and every command's outputs live outside it,
in its state folder under XDG_STATE_HOME (each test has its own: tests/conftest.py), where the
code under test cannot delete them; a ledger an older stagebot kept in out/ is still found, and
`bot run` says how to move it out."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers.catalog_repo import committed_catalog_repo
from helpers.cli import bot_process
from helpers.shards import entry

from stagebot.harness.ledger.book import Ledger
from stagebot.harness.ledger.location import state_folder

COMMENT = '/bot run --stage-list "CPU-Build_Check"'


def _bot(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return bot_process(*args, cwd=cwd)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A committed git repository holding the fixture catalog, a suite and a subfolder."""
    return committed_catalog_repo(
        tmp_path / "repo", {"check_suite.py": "def test_ok():\n    assert True\n"}
    )


def _numbers(ledger: Path) -> list[int]:
    with Ledger.open(ledger, readonly=True) as book:
        return list(range(1, (book.latest_number() or 0) + 1))


def test_bot_run_keeps_its_ledger_and_outputs_outside_the_repository(repo: Path) -> None:
    done = _bot(repo / "sub", "run", "--catalog", str(repo / "catalog.yaml"), COMMENT)
    assert done.returncode == 0, done.stdout + done.stderr
    ledger = state_folder(repo) / "ledger.sqlite"
    assert done.stdout.endswith(f"; ledger: {ledger}\n")  # where the run says it is
    assert _numbers(ledger) == [1]
    assert (ledger.parent / "pipeline-1" / "CPU-Build_Check" / "result.json").is_file()
    assert not (repo / "out").exists()  # nothing of stagebot's in the code's reach
    # the control: a ledger named on the command line is that one
    named = repo.parent / "mine.sqlite"
    again = _bot(repo, "run", "--catalog", str(repo / "catalog.yaml"), "--ledger", str(named),
                 COMMENT)  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert _numbers(named) == [1] and _numbers(ledger) == [1]
    assert again.stdout.endswith(f"; ledger: {named}\n") and "former" not in again.stderr


def test_a_ledger_an_older_stagebot_left_in_out_is_used_until_moved(repo: Path) -> None:
    former = repo / "out" / "ledger.sqlite"
    catalog = ["--catalog", str(repo / "catalog.yaml")]
    first = _bot(repo, "run", *catalog, "--ledger", str(former), COMMENT)
    assert first.returncode == 0, first.stdout + first.stderr
    second = _bot(repo / "sub", "run", *catalog, COMMENT)  # found, and its history kept
    assert second.returncode == 0, second.stdout + second.stderr
    assert _numbers(former) == [1, 2] and "| CPU-Build_Check | REUSED |" in second.stdout
    moved = state_folder(repo) / "ledger.sqlite"
    assert not moved.exists()
    (said,) = [line for line in second.stderr.splitlines() if line.startswith("ledger: ")]
    assert said.startswith(f"ledger: {former} (the former default, inside the repository")
    move = said.split("move it out: ", 1)[1].removesuffix(")")
    assert move == f"mkdir -p {moved.parent} && mv {former} {moved}"
    subprocess.run(["bash", "-c", move], check=True)
    third = _bot(repo, "run", *catalog, COMMENT)
    assert third.returncode == 0, third.stdout + third.stderr
    assert third.stdout.endswith(f"; ledger: {moved}\n") and _numbers(moved) == [1, 2, 3]
    assert "former default" not in third.stderr
    report = _bot(repo, "report", "--format", "json")  # bot report reads the same default
    assert report.returncode == 0 and json.loads(report.stdout)["pipeline"] == 3, report.stderr


def test_run_stage_writes_its_shard_folder_outside_the_repository(repo: Path) -> None:
    shard = json.dumps(entry().to_json())
    done = _bot(repo, "run-stage", "--entry", shard)
    assert done.returncode == 0, done.stdout + done.stderr
    folder = state_folder(repo) / "run-stage" / "pipeline-1" / "CPU-PyTorch-1"
    assert json.loads((folder / "result.json").read_text())["state"] == "SUCCESS"
    assert str(folder / "result.json") in done.stdout
    assert not (repo / "out").exists()
    # the control: --out is obeyed
    named = _bot(repo, "run-stage", "--entry", shard, "--out", str(repo.parent / "results"))
    assert named.returncode == 0, named.stdout + named.stderr
    assert (repo.parent / "results" / "CPU-PyTorch-1" / "result.json").is_file()
