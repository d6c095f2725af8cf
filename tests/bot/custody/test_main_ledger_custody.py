"""The promise of main's ledger in custody (issue 50): a fetched main ledger is used, read-only,
only when the stagebot/ledger status of the commit it names records its digest, and no side
file could change it; anything else leaves the report comparing within the PR's own ledger,
saying why. A restored PR ledger that cannot be opened is moved aside, never used."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from helpers.memory_github import MemoryGitHub

from stagebot.bot.custody.files import file_digest
from stagebot.bot.custody.transport import LEDGER_FILE
from stagebot.bot.custody.trust import (
    ArtifactMismatch,
    RestoredLedger,
    check_plan_artifact,
    fetched_main_ledger,
    main_ledger_trust,
    open_main_ledger,
    record_main_ledger,
)
from stagebot.bot.protocols.names import MAIN_LEDGER
from stagebot.harness.ledger.book import Ledger
from stagebot.harness.ledger.store import LedgerError
from stagebot.stages.errors import StagebotError

RUN = {"version": 1, "command": "run", "options": {}}
COMMIT = "d" * 40


def mains_ledger(path: Path, commit: str = COMMIT) -> Path:
    with Ledger.open(path) as book:
        number = book.start_pipeline(command=RUN, commit=commit, branch="main")
        book.finish_pipeline(number, "SUCCESS")
    return path


@pytest.mark.parametrize("tampered", [False, True])
def test_mains_ledger_is_used_read_only_only_as_the_bot_recorded_it(tmp_path, tampered) -> None:
    github = MemoryGitHub()
    path = mains_ledger(tmp_path / "main.sqlite")
    said = record_main_ledger(github, path, run_id=77)
    assert f"status of {COMMIT[:7]})" in said
    (status,) = github.statuses(COMMIT, "stagebot/ledger")
    assert status.description == f"ledger sha256 {file_digest(path)} run 77"
    if tampered:
        db = sqlite3.connect(path)  # a stage job rewrites a result
        db.execute("UPDATE pipelines SET state = 'FAILURE'")
        db.commit()
        db.close()
    book, lines = open_main_ledger(lambda: github, path)
    if tampered:
        assert book is None
        assert lines == [
            f"warning: main's ledger {path} is not one the bot saved (its sha256 is in none of "
            "the stagebot/ledger statuses of the commit it names); failures are compared within "
            "this PR's ledger"
        ]
        return
    assert lines == [] and book.latest_number() == 1
    with pytest.raises(LedgerError, match="read-only"):
        book.start_pipeline(command=RUN, commit=COMMIT)
    book.close()
    assert main_ledger_trust(lambda: github, path)() == {file_digest(path)}


def test_no_mains_ledger_is_no_base_and_no_warning(tmp_path) -> None:
    assert open_main_ledger(lambda: MemoryGitHub(), None) == (None, [])
    assert open_main_ledger(lambda: MemoryGitHub(), tmp_path / "absent.sqlite") == (None, [])


def test_a_ledger_naming_no_commit_is_vouched_for_by_nothing(tmp_path) -> None:
    github = MemoryGitHub()
    path = mains_ledger(tmp_path / "main.sqlite", commit="not-a-sha")
    assert "digest is unrecorded" in record_main_ledger(github, path, run_id=None)
    assert github.writes == []
    assert open_main_ledger(lambda: github, path)[0] is None


def test_a_fetch_that_finds_no_ledger_offers_none(tmp_path) -> None:
    assert fetched_main_ledger(MemoryGitHub(), _Config(), tmp_path / "main.sqlite") is None


def _main_with_ledger(tmp_path: Path) -> MemoryGitHub:
    """A repository whose main commit's stagebot/ledger status names the ledger that its report
    run (run 77, report.yml on main) uploaded."""
    github = MemoryGitHub()
    github.main_commits = [COMMIT]
    path = mains_ledger(tmp_path / "uploaded.sqlite")
    record_main_ledger(github, path, run_id=77)
    github.add_run(1, status="completed", run_id=77, path=".github/workflows/report.yml")
    github.add_artifact(77, MAIN_LEDGER, {LEDGER_FILE: path.read_bytes()})
    return github


def test_a_fetch_that_finds_mains_vouched_ledger_offers_it_read_only(tmp_path) -> None:
    book = fetched_main_ledger(_main_with_ledger(tmp_path), _Config(), tmp_path / "main.sqlite")
    assert book is not None and book.latest_number() == 1
    with pytest.raises(LedgerError, match="read-only"):
        book.start_pipeline(command=RUN, commit=COMMIT)
    book.close()


def test_a_fetch_that_github_refuses_offers_none_and_raises_nothing(tmp_path) -> None:
    class Refusing(MemoryGitHub):
        def default_branch(self) -> str:
            raise StagebotError("GitHub answered 502 three times")

    assert fetched_main_ledger(Refusing(), _Config(), tmp_path / "main.sqlite") is None


def test_a_replaced_plan_artifact_exits_3_and_names_both_digests(tmp_path) -> None:
    """docs/github.md: `bot publish --artifact-digest` publishes nothing and exits 3; the
    message shows the first 16 hex digits of the digest found and of the one recorded."""
    from stagebot.bot.custody.files import artifact_digest, artifact_files

    plan, ledger = tmp_path / "plan.json", tmp_path / "ledger.sqlite"
    plan.write_text("{}")
    expected = "0123456789abcdef" + "f" * 48
    with pytest.raises(ArtifactMismatch) as raised:
        check_plan_artifact(expected, plan, ledger)
    actual = artifact_digest(artifact_files(plan, ledger))
    assert raised.value.exit_code == 3
    assert f"has digest {actual[:16]}…, not the 0123456789abcdef… the plan job" in str(raised.value)


def test_a_ledger_in_a_folder_not_made_yet_is_created_with_its_folders(tmp_path) -> None:
    restored = RestoredLedger(tmp_path / "state" / "pipeline" / "ledger.sqlite")
    assert restored.get().latest_number() is None
    restored.close()
    assert (tmp_path / "state" / "pipeline" / "ledger.sqlite").is_file()


class _Config:
    """What fetch_main_ledger reads of the bot's configuration."""

    report_workflow = "report.yml"
    ledger_artifact = "stagebot-ledger"


def test_a_restored_ledger_that_cannot_be_opened_is_moved_aside(tmp_path) -> None:
    path = tmp_path / "ledger.sqlite"
    path.write_bytes(b"not a database at all")
    restored = RestoredLedger(path)
    book = restored.get()
    assert "could not be used" in restored.notice and book.latest_number() is None
    (aside,) = tmp_path.glob("ledger.sqlite.rejected-*")
    assert aside.read_bytes() == b"not a database at all"
    restored.close()
    restored.close()  # closing twice is harmless
    assert restored.digest() is None
