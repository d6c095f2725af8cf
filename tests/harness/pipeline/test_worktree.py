"""The code a local run tests: the repository root from any subfolder, and a tree identity that
stagebot's own outputs never make dirty (else the next run silently reuses nothing); and the
commands a new user types there first (`bot report`, `bot stages`, `bot run --json`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers.catalog_repo import committed_catalog_repo
from helpers.cli import bot_process

from stagebot.harness.ledger.location import state_folder
from stagebot.harness.pipeline.worktree import make_output_folder, repository_root, tree_identity

COMMENT = '/bot run --stage-list "CPU-Build_Check"'


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A committed git repository holding the fixture catalog and a subfolder."""
    return committed_catalog_repo(tmp_path / "repo", {"sub/notes.txt": "tracked\n"})


def test_repository_root_from_a_subfolder(repo: Path, tmp_path: Path) -> None:
    assert repository_root(repo / "sub") == repo.resolve()
    outside = tmp_path / "plain"
    outside.mkdir()
    assert repository_root(outside) == outside


def test_own_outputs_are_not_changes(repo: Path) -> None:
    clean, dirty = tree_identity(repo)
    assert not dirty
    out = repo / "results" / "run1"
    out.mkdir(parents=True)
    (out / "report.md").write_text("x")
    (repo / "my.sqlite").write_bytes(b"ledger")
    (repo / "my.sqlite-wal").write_bytes(b"wal")
    assert tree_identity(repo, outputs=(out, repo / "my.sqlite")) == (clean, False)
    assert tree_identity(repo)[1], "the same files, not named as outputs, are changes"
    (repo / "my.sqlite-other").write_bytes(b"not a side file")
    assert tree_identity(repo, outputs=(out, repo / "my.sqlite"))[1]


def test_an_output_folder_hides_itself_from_git(repo: Path) -> None:
    clean, _ = tree_identity(repo)
    make_output_folder(repo / "results" / "a")
    (repo / "results" / "a" / "report.md").write_text("x")
    assert tree_identity(repo) == (clean, False), "a later run sees no change"
    mine = repo / "sub"  # a folder with the user's files is never marked
    make_output_folder(mine)
    assert not (mine / ".gitignore").exists()


def _bot(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return bot_process(*args, cwd=cwd, env={"USER": "alice", "LOGNAME": "alice"})


def test_reuse_from_a_subfolder_and_another_out(repo: Path) -> None:
    """Run from a subfolder, each time with a new --out inside the repository: the ledger is the
    repository's, the second run reuses the first, and only a real change stops reuse."""
    catalog = str(repo / "catalog.yaml")
    first = _bot(repo / "sub", "run", "--catalog", catalog, "--out", "../results/one", COMMENT)
    assert first.returncode == 0, first.stdout + first.stderr
    assert (state_folder(repo) / "ledger.sqlite").exists()  # the repository's, outside it
    assert not (repo / "out").exists() and not (repo / "sub" / "out").exists()
    assert "triggered by alice" in first.stdout
    second = _bot(repo / "sub", "run", "--catalog", catalog, "--out", "../results/two", COMMENT)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "| CPU-Build_Check | REUSED |" in second.stdout and "+dirty" not in second.stdout
    (repo / "sub" / "notes.txt").write_text("changed\n")
    third = _bot(repo / "sub", "run", "--catalog", catalog, "--out", "../results/three", COMMENT)
    assert third.returncode == 0, third.stdout + third.stderr
    assert "| CPU-Build_Check | SUCCESS |" in third.stdout
    assert "+dirty`" in third.stdout and "**Uncommitted changes:**" in third.stdout


def test_first_commands_from_a_subfolder(repo: Path) -> None:
    catalog = str(repo / "catalog.yaml")
    sub = repo / "sub"
    nothing = _bot(sub, "report")
    assert nothing.returncode == 2 and nothing.stderr.startswith("Error: no ledger at ")
    done = _bot(sub, "run", "--json", "--catalog", catalog, COMMENT)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)  # stdout is the JSON report alone; the rest went to stderr
    assert data["pipeline"] == 1 and data["state"] == "SUCCESS" and data["exit_code"] == 0
    assert "completed with state SUCCESS" in done.stderr
    again = _bot(sub, "run", "--catalog", catalog, COMMENT)
    assert again.returncode == 0
    newest = _bot(sub, "report")  # the default ledger's newest pipeline
    assert newest.returncode == 0 and "**Pipeline #2**" in newest.stdout, newest.stderr
    assert "| CPU-Build_Check | REUSED |" in newest.stdout


def test_stages_lists_by_default_and_takes_paths_inside_the_repository() -> None:
    from fixtures.botrun import ROOT, bot

    listing = bot("stages")
    assert listing.returncode == 0 and listing.stdout.startswith("STAGE ")
    assert bot("stages", "--list").stdout == listing.stdout
    suite = ROOT / "harness" / "suites" / "nvfp4_moe" / "test_layouts.py"
    plain = bot("stages", "--test", "harness/suites/nvfp4_moe/test_layouts.py")
    assert plain.returncode == 0 and "CPU-PyTorch-1" in plain.stdout
    for spelling in ("./harness/suites/nvfp4_moe/test_layouts.py", str(suite), f"{suite}::t"):
        assert bot("stages", "--test", spelling).stdout == plain.stdout, spelling
    outside = bot("stages", "--test", "/elsewhere/test_x.py")
    assert outside.returncode == 2 and "outside the repository" in outside.stderr
    both = bot("stages", "--list", "--stage", "CPU-PyTorch-1")
    assert both.returncode == 2
