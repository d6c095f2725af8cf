"""Decisions read from the difference between base and PR (issue 44), each with its control;
tests/e2e/test_failure_corpus_v4.py runs them end to end."""

from __future__ import annotations

import subprocess

from stagebot.harness.analysis.classify import analyse, error_kind, worse_than
from stagebot.harness.analysis.evidence import (
    failing_frame,
    never_ran_culprit,
    never_ran_evidence,
    strip_ansi,
    test_evidence,
)
from stagebot.harness.analysis.renames import renamed_from
from stagebot.harness.results import StageResult
from stagebot.harness.results import TestOutcome as Outcome


def shard(tests, stage="S-PyTorch-1", state="FAILURE") -> StageResult:
    return StageResult(stage, 1, 1, state, None, None, 1.0, "CPU", [], list(tests))


def test_a_kind_is_the_exception_and_its_masked_message() -> None:
    assert error_kind("assert 3 == 2") == error_kind("assert 4 == 2")  # numbers masked
    assert error_kind("RuntimeError: at 0x7f00: bad") == error_kind("RuntimeError: at 0x9a: bad")
    assert error_kind("AssertionError: keys must be unique") != error_kind("assert [1] == [2]")


def test_worse_than_base_needs_twice_the_mismatch() -> None:
    there = "AssertionError: x — 2/4096 elements mismatched, max abs diff 0.15"
    assert worse_than(
        there, "AssertionError: x — 417/4096 elements mismatched, max abs diff 0.61"
    ) == ("417/4096 mismatched (2 there), max abs diff 0.61 (0.15 there)")
    assert (
        worse_than(there, "AssertionError: x — 3/4096 elements mismatched, max abs diff 0.16")
        is None
    )
    assert worse_than("AssertionError: x", "AssertionError: y") is None


def test_the_failing_frame_is_the_last_def_and_location() -> None:
    longrepr = (
        "    def test_x():\n>       helper()\n\nt.py:3: \n_ _ _\n\n    def helper():\n"
        ">       raise KeyError(7)\nE       KeyError: 7\n\nsrc/m.py:9: KeyError"
    )
    assert failing_frame(longrepr) == "src/m.py:helper"
    native = 'Traceback:\n  File "a.py", line 1, in <module>\n  File "src/b.py", line 4, in run\n'
    assert failing_frame(native) == "src/b.py:run"
    assert failing_frame("no traceback here") is None


def test_the_same_error_raised_elsewhere_is_new() -> None:
    def log(where: str) -> str:
        return (
            f"    def {where}():\n>       assert x == 1\nE       assert 2 == 1\n\n"
            f"{where}.py:3: AssertionError"
        )

    base = {("S-PyTorch", "t.py::moved"): Outcome("t.py::moved", "failed", 1, "assert 2 == 1")}
    base |= {("S-PyTorch", "t.py::same"): Outcome("t.py::same", "failed", 1, "assert 2 == 1")}
    tests = [Outcome(t, "failed", 1, "assert 2 == 1") for t in ("t.py::moved", "t.py::same")]
    got = analyse(
        [shard(tests)],
        base=base,
        base_pipeline=4,
        logs={
            ("S-PyTorch-1", "t.py::moved"): log("moved_to"),
            ("S-PyTorch-1", "t.py::same"): log("f"),
        },
        base_logs={
            ("S-PyTorch", "t.py::moved"): log("was_in"),
            ("S-PyTorch", "t.py::same"): log("f"),
        },
    )
    by_id = {f.test_id: f for f in got.failures}
    assert by_id["t.py::moved"].category == "NEW"
    assert by_id["t.py::moved"].note == (
        "fails elsewhere than on base #4: in moved_to.py:moved_to, there in was_in.py:was_in"
    )
    assert by_id["t.py::same"].category == "PRE-EXISTING"  # the control


def test_a_hang_that_reproduces_alone_is_new_a_one_off_stall_infra() -> None:
    """The shard ran out of time during each test; re-run alone with a longer limit, one hung
    again (NEW: the PR's hang, it passed on the base), the other passed (INFRA: the machine's
    limit, the control). Both passed on the base as fast as the tests here."""
    load = "load average 3.1 on 2 CPUs"
    timeout = f"timeout: still running when the shard was killed after 60 s, {load}"
    again = "; it hung again when re-run alone with a limit of 126 s"
    tests = [
        Outcome("t.py::hangs", "error", 0, timeout + again),
        Outcome("u.py::stalls", "error", 0, f"{timeout}; it passed when re-run alone"),
    ]
    base = {("S-PyTorch", t.test_id): Outcome(t.test_id, "passed", 0.02) for t in tests}
    got = analyse([shard(tests, state="ERROR")], base=base, base_pipeline=3)
    by_id = {f.test_id: f for f in got.failures}
    hang = by_id["t.py::hangs"]
    assert (hang.category, hang.signature) == ("NEW", "hang: hangs when run alone (126 s limit)")
    assert hang.note == "passed on base #3 in 0.02 s"
    stall = by_id["u.py::stalls"]
    assert (stall.category, stall.signature) == ("INFRA", f"time limit: 60 s ran out ({load})")


def test_tests_that_never_started_are_listed_with_the_test_that_ended_the_session() -> None:
    why = never_ran_evidence("t.py::ends", None)
    assert never_ran_culprit(why) == "t.py::ends"
    tests = [
        Outcome("t.py::ends", "error", 0, "crashed: pytest exited 0 during this test"),
        Outcome("t.py::after", "error", 0, why),
        Outcome("t.py::last", "error", 0, why),
    ]
    (failure,) = analyse([shard(tests, state="ERROR")]).failures
    assert (failure.test_id, failure.never_ran) == ("t.py::ends", ("t.py::after", "t.py::last"))
    orphans = [Outcome(t, "error", 0, never_ran_evidence(None, 0)) for t in ("a.py::x", "a.py::y")]
    (first,) = analyse([shard(orphans)]).failures  # no culprit: the first carries the others
    assert (first.test_id, first.never_ran) == ("a.py::x", ("a.py::y",))


def test_lost_coverage_needs_every_test_skipped_here_and_passed_there() -> None:
    base = {
        ("S-PyTorch", f"{f}::{t}"): Outcome(f"{f}::{t}", outcome, 1)
        for f, t, outcome in (
            ("lost.py", "a", "passed"), ("lost.py", "b", "passed"),
            ("half.py", "a", "passed"), ("half.py", "b", "passed"),
            ("old.py", "a", "skipped"),
        )
    }  # fmt: skip
    tests = [
        Outcome("lost.py::a", "skipped", 0, "flaky on new runners"),
        Outcome("lost.py::b", "skipped", 0, "flaky on new runners"),
        Outcome("half.py::a", "skipped", 0, "slow"),
        Outcome("half.py::b", "passed", 1),
        Outcome("old.py::a", "skipped", 0, "needs a GPU"),
        Outcome("waived.py::a", "waived", 0, "issue 3"),
    ]
    got = analyse([shard(tests, state="SUCCESS")], base=base, base_pipeline=2)
    lost = [f for f in got.failures if f.category == "NEW"]
    assert [f.test_id for f in lost] == ["lost.py (lost coverage)"]
    assert lost[0].note == "passed on base #2, skipped here: a, b"
    assert (got.state, got.exit_code) == ("FAILURE", 1)


def test_terminal_escapes_leave_the_evidence() -> None:
    assert strip_ansi("\x1b[1;31mred\x1b[0m \x1b]0;title\x07ok") == "red ok"
    assert (
        test_evidence("E   RuntimeError: \x1b[31mno palette\x1b[0m") == "RuntimeError: no palette"
    )


def test_a_renamed_test_is_found_by_its_body(tmp_path) -> None:
    def git(*args: str) -> str:
        identity = ["-c", "user.name=t", "-c", "user.email=t@example.invalid"]
        done = subprocess.run(["git", *identity, *args], cwd=tmp_path, capture_output=True)
        return done.stdout.decode().strip()

    test = tmp_path / "check_x.py"
    test.write_text("def test_old():\n    assert 1 + 1 == 2\n\n\ndef test_other():\n    pass\n")
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "base")
    base = git("rev-parse", "HEAD")
    test.write_text("def test_new():\n    assert 1 + 1 == 2\n\n\ndef test_changed():\n    x = 1\n")
    gone = ["check_x.py::test_old", "check_x.py::test_other"]
    assert renamed_from("check_x.py::test_new", tmp_path, base, gone) == "check_x.py::test_old"
    assert renamed_from("check_x.py::test_changed", tmp_path, base, gone) is None  # other body
    assert renamed_from("check_x.py::test_new", tmp_path, "0" * 40, gone) is None  # no such commit
