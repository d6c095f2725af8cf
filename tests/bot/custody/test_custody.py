"""The bot's custody of a restored ledger (bot/custody/trust.py): the digest its reply records is
the file it saves, taken without closing the ledger under the steps that still use it."""

from __future__ import annotations

from stagebot.bot.custody.files import file_digest
from stagebot.bot.custody.trust import RestoredLedger, notice_file

RUN = {"version": 1, "command": "run", "options": {}}


def test_the_recorded_digest_is_the_saved_files_and_the_ledger_stays_open(tmp_path) -> None:
    path = tmp_path / "ledger.sqlite"
    restored = RestoredLedger(path)
    book = restored.get()
    book.start_pipeline(command=RUN, commit="a" * 40)
    digest = restored.digest()
    assert restored.get() is book  # not closed: a step after the reply finds the same ledger
    assert book.pipeline(1) is not None
    restored.close()
    assert file_digest(path) == digest


def test_no_digest_when_no_step_used_the_ledger(tmp_path) -> None:
    restored = RestoredLedger(tmp_path / "ledger.sqlite")
    assert restored.digest() is None and not (tmp_path / "ledger.sqlite").exists()


def test_a_ledger_the_bot_did_not_save_is_moved_aside_once(tmp_path) -> None:
    path = tmp_path / "ledger.sqlite"
    RestoredLedger(path).get().close()  # a valid ledger, but no digest vouches for it
    restored = RestoredLedger(path, trusted=set)
    book = restored.get()
    assert "is not one the bot saved" in restored.notice
    assert len(list(tmp_path.glob("ledger.sqlite.rejected-*"))) == 1
    book.start_pipeline(command=RUN, commit="b" * 40)
    restored.close()
    restored.get()  # this job's own ledger now: not checked (and not moved) again
    assert len(list(tmp_path.glob("ledger.sqlite.rejected-*"))) == 1
    restored.close()


def test_fetch_ledgers_notice_reaches_the_reply(tmp_path) -> None:
    path = tmp_path / "ledger.sqlite"
    notice_file(path).write_text("GitHub was down\n")
    assert RestoredLedger(path).notice == "GitHub was down"
