"""What the CLI says and exits with when something is wrong: an unknown subcommand, a bug in
stagebot, an --out or --ledger folder, a ledger SQLite finds damaged."""

from __future__ import annotations

import hashlib
import random
import shutil
import sqlite3

import pytest
from fixtures.botrun import bot, run_stages

from stagebot.bot.cli.main import main
from stagebot.harness.ledger.book import Ledger


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        main(list(args))
    out, err = capsys.readouterr()
    return done.value.code, out, err


def test_an_unknown_subcommand_is_one_error_line_with_a_suggestion(capsys) -> None:
    code, out, err = run_main(capsys, "rnu", "/bot run")
    assert code == 2 and out == ""
    assert err == "Error: unknown command 'rnu'; did you mean 'run'?\n"


def test_an_unknown_subcommand_with_no_close_match_points_at_the_help(capsys) -> None:
    code, _, err = run_main(capsys, "xyzzy")
    assert code == 2 and err == "Error: unknown command 'xyzzy' (`bot --help` lists them)\n"


def test_an_uncaught_exception_exits_3_not_the_code_of_a_test_failure(capsys, monkeypatch):
    def broken(text):
        raise RuntimeError("a bug in stagebot")

    monkeypatch.setattr("stagebot.bot.cli.local.parse.parse_comment", broken)
    code, _, err = run_main(capsys, "parse", "/bot run")
    assert code == 3
    assert "RuntimeError: a bug in stagebot" in err  # the traceback, for the bug report
    assert err.rstrip().endswith("Error: stagebot failed unexpectedly (exit 3)")


def test_an_out_folder_that_cannot_be_created_records_nothing(tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    ledger = tmp_path / "ledger.sqlite"
    done = run_stages(ledger, blocker / "out", "CPU-Build_Check")
    assert done.returncode == 3, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"Error: --out {blocker / 'out'} cannot be created"), line
    with Ledger.open(ledger, readonly=True) as book:
        assert book.latest_number() is None  # no pipeline, so none "Cancelled"


def test_a_ledger_in_a_folder_that_does_not_exist_yet_is_created(tmp_path) -> None:
    ledger = tmp_path / "new" / "deeper" / "ledger.sqlite"
    done = run_stages(ledger, tmp_path / "out", "CPU-Build_Check")
    assert done.returncode == 0, done.stdout + done.stderr
    with Ledger.open(ledger, readonly=True) as book:
        assert book.pipeline(book.latest_number()).state == "SUCCESS"


def _md5(path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def damaged_ledger(tmp_path_factory):
    """A copy of a real ledger with 2 KB of random bytes written into its middle."""
    tmp = tmp_path_factory.mktemp("damaged")
    good = tmp / "good.sqlite"
    done = run_stages(good, tmp / "out-good", "CPU-PyTorch-1, CPU-Build_Check")
    assert done.returncode == 0, done.stdout + done.stderr
    with sqlite3.connect(good) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page, pages = (
            connection.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_size", "page_count")
        )
    damaged = tmp / "damaged.sqlite"
    shutil.copy(good, damaged)
    data = bytearray(damaged.read_bytes())
    middle = page * (pages // 2)
    data[middle : middle + 2048] = random.Random(12).randbytes(2048)
    damaged.write_bytes(bytes(data))
    return tmp, damaged


def test_a_damaged_ledger_is_refused_by_bot_run_before_anything_runs(damaged_ledger) -> None:
    tmp, ledger = damaged_ledger
    before = _md5(ledger)
    out = tmp / "out-run"
    done = run_stages(ledger, out, "CPU-Build_Check")
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"Error: ledger {ledger} is corrupt (SQLite's quick_check" in done.stderr
    assert "Traceback" not in done.stderr and not out.exists()
    assert _md5(ledger) == before


def test_a_damaged_ledger_is_refused_by_bot_report(damaged_ledger) -> None:
    _, ledger = damaged_ledger
    before = _md5(ledger)
    done = bot("report", "--ledger", str(ledger))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "is corrupt (SQLite's quick_check" in done.stderr and done.stdout == ""
    assert _md5(ledger) == before
