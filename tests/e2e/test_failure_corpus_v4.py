"""The v4 failure corpus (tests/fixtures/corpus/v4): tests that must not vanish from the report,
and a base that is another commit, each through `bot run` with real pytest processes.

`base/` is the repository at the base commit; `pr/` the files the PR changes (copied over it).
Plain Python, no torch: the cases are about what the harness keeps, not about the library.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess

import pytest
from fixtures.botrun import ROOT, bot
from helpers.cli import bot_process

from stagebot.templates.markdown import escape

pytestmark = pytest.mark.slow

CORPUS = ROOT / "tests" / "fixtures" / "corpus" / "v4"
FAMILIES = "Exit Interrupt Skip Clean History Many Output Compare Slow Deps Machine Oomkill Oneoff"
FAMILIES += " Stall Leftover Poison"
STAGES = ", ".join(f"CPU-PyTorch-{name}-1" for name in FAMILIES.split())
# The PR run's shard timeout: the slow shard's 40 one-second tests run out of it; every other
# shard needs a few seconds.
SHARD_TIMEOUT_S = 25
# The PR's runner: its image lost tinyplot (the corpus's conftest.py reads this), it is offline,
# its GPU is gone (src/kit/net.py and gpu.py simulate them with the libraries' words), its
# OOM killer kills one process once (src/kit/preload.py) and its storage stalls once
# (src/kit/storage.py).
BROKEN_RUNNER = {
    "CORPUS_IMAGE_LOST": "tinyplot",
    "CORPUS_OFFLINE": "1",
    "CORPUS_GPU_GONE": "1",
    "CORPUS_OOM_KILL_ONCE": "1",
    "CORPUS_STALL_ONCE": "1",
}
SHUTDOWN, SIGNALS = "tests/exit/check_shutdown.py::", "tests/interrupt/check_signals.py::"


def _run(tmp, repo, *args, out=None, env=None, stages=STAGES):
    common = ["--catalog", str(repo / "ci"), "--ledger", str(tmp / "ledger.sqlite")]
    common += ["--root", str(repo), "--cpu-slots", "2"]
    if out is not None:
        common += ["--out", str(out)]
    comment = f'/bot run --stage-list "{stages}" --disable-fail-fast'
    return bot("run", *common, *args, comment, env=env)


def _report(tmp, repo, *args) -> dict:
    done = bot(
        "report", "--ledger", str(tmp / "ledger.sqlite"), "--root", str(repo), "--format", "json",
        *args,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def _overlay_pr(repo) -> list[str]:
    changed = sorted(str(p.relative_to(CORPUS / "pr")) for p in (CORPUS / "pr").rglob("*.*"))
    shutil.copytree(CORPUS / "pr", repo, dirs_exist_ok=True)
    return changed


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("corpus4")
    repo = tmp / "repo"
    shutil.copytree(CORPUS / "base", repo)
    base = _run(tmp, repo, "--commit", "base0", "--branch", "main", out=tmp / "base")
    assert base.returncode == 1, base.stdout + base.stderr  # tests/compare fails there already
    (tmp / "changed.txt").write_text("\n".join(_overlay_pr(repo)) + "\n")
    (tmp / "cache").mkdir()
    (tmp / "cache" / "model.bin").write_bytes(bytes(range(100)))  # a download cut short
    with socket.socket() as held:  # another process's port, left on the runner
        held.bind(("127.0.0.1", 0))
        held.listen()
        leftovers = {"CORPUS_PORT": str(held.getsockname()[1]), "CORPUS_CACHE": str(tmp / "cache")}
        pr = _run(
            tmp, repo, "--commit", "head1", "--base-commit", "base0", "--pr", "7",
            "--changed-files", str(tmp / "changed.txt"), "--shard-timeout", str(SHARD_TIMEOUT_S),
            out=tmp / "pr", env={**BROKEN_RUNNER, **leftovers},
        )  # fmt: skip
    assert pr.returncode == 1, pr.stdout + pr.stderr
    report = _report(tmp, repo)
    failures = {f["test_id"]: f for f in report["failures"]}
    results = {p.parent.name: json.loads(p.read_text()) for p in (tmp / "pr").glob("*/result.json")}
    texts = {name: (tmp / "pr" / name).read_text() for name in ("report.md", "report.html")}
    return failures, results, texts, pr.stdout


# -- never lose a test ---------------------------------------------------------------------------


def test_a_test_that_ends_the_interpreter_lists_the_tests_it_took_with_it(corpus) -> None:
    """os._exit(0) in the PR's code: the two tests collected after it never started; they are
    listed with it, the stage is no SUCCESS (issue 44)."""
    failures, results, texts, _ = corpus
    culprit = failures[SHUTDOWN + "test_finish_sums"]
    assert (culprit["category"], culprit["signature"]) == ("NEW", "crash: pytest exited 0")
    assert culprit["never_ran"] == [SHUTDOWN + "test_after_one", SHUTDOWN + "test_after_two"]
    assert SHUTDOWN + "test_after_one" not in failures  # one entry, not three
    outcomes = {t["test_id"]: t for t in results["CPU-PyTorch-Exit-1"]["tests"]}
    assert len(outcomes) == 4 and results["CPU-PyTorch-Exit-1"]["state"] != "SUCCESS"
    assert outcomes[SHUTDOWN + "test_after_two"]["evidence"].startswith("never ran: ")
    for text in texts.values():
        assert "never ran: 2 collected test(s) never started" in text
        assert "test_after_two" in text


def test_a_keyboard_interrupt_raised_by_the_code_keeps_the_tests_after_it(corpus) -> None:
    failures, results, _, _ = corpus
    culprit = failures[SIGNALS + "test_wait_sorts"]
    assert culprit["category"] == "NEW"
    assert culprit["never_ran"] == [SIGNALS + "test_wait_empty"]
    assert {t["test_id"] for t in results["CPU-PyTorch-Interrupt-1"]["tests"]} == {
        SIGNALS + "test_wait_sorts",
        SIGNALS + "test_wait_empty",
    }


def test_tests_the_pr_skipped_are_lost_coverage(corpus) -> None:
    """Every test of a file passed on the base and is skipped here: a NEW finding naming them,
    the file that added the skip its suspect. A file skipped on the base too, and a file the
    waives file skips, lost nothing (the negative controls)."""
    failures, _, texts, _ = corpus
    lost = failures["tests/skip/check_kernels.py (lost coverage)"]
    assert lost["category"] == "NEW"
    assert lost["signature"] == "lost coverage: 2 test(s) skipped here, passed on base"
    assert lost["note"] == "passed on base #1, skipped here: test_add_small, test_add_large"
    assert lost["evidence"] == "skipped here: slow on the new runners"
    assert [s["path"] for s in lost["suspects"]] == ["tests/skip/check_kernels.py"]
    assert not any("check_gpu_only" in t for t in failures)
    assert failures["tests/skip/check_slow_path.py::test_add_negative"]["category"] == "WAIVED"
    assert not any("check_slow_path.py (lost coverage)" in t for t in failures)
    assert "lost coverage: 2 test(s) skipped here" in texts["report.md"]


def test_an_unchanged_failure_stays_as_it_was(corpus) -> None:
    """The control: an ordinary NEW failure is unchanged by the cases around it."""
    failures, _, _, _ = corpus
    plain = failures["tests/history/check_history.py::test_mul"]
    assert (plain["category"], plain.get("never_ran", [])) == ("NEW", [])
    assert [s["path"] for s in plain["suspects"]] == ["src/kit/calc.py"]


def test_the_default_output_folder_is_out_of_the_tests_reach(tmp_path) -> None:
    """A PR whose test deletes the repository's out/ folder: without --out the shard folders
    live outside the repository, so its stream, log and results are whole."""
    repo = tmp_path / "repo"
    shutil.copytree(CORPUS / "base", repo)
    _overlay_pr(repo)
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    done = bot_process(
        "run", "--catalog", str(repo / "ci"), "--ledger", str(tmp_path / "ledger.sqlite"),
        "--root", str(repo), "--commit", "c1", '/bot run --stage-list "CPU-PyTorch-Clean-1"',
        cwd=repo, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (result,) = (tmp_path / "state").rglob("CPU-PyTorch-Clean-1/result.json")
    data = json.loads(result.read_text())
    assert data["state"] == "SUCCESS"
    assert sorted(t["outcome"] for t in data["tests"]) == ["passed", "passed"]
    assert result.with_name("tests.jsonl").read_text().count('"event": "result"') == 2
    assert str(repo) not in str(result)


def test_a_shard_folder_the_tests_removed_is_reported_tampered(tmp_path) -> None:
    """--out inside the repository, and the PR's test deletes it: the report says so rather
    than "no test ran here"; the same stage without the deleting test passes (the control)."""
    repo = tmp_path / "repo"
    shutil.copytree(CORPUS / "base", repo)
    out = repo / "out" / "run"
    base = _run(
        tmp_path, repo, "--commit", "b0", "--branch", "main", out=out, stages="CPU-PyTorch-Clean-1"
    )
    assert base.returncode == 0, base.stdout + base.stderr
    _overlay_pr(repo)
    pr = _run(
        tmp_path,
        repo,
        "--commit",
        "h1",
        "--base-commit",
        "b0",
        out=out,
        stages="CPU-PyTorch-Clean-1",
    )
    assert pr.returncode == 1, pr.stdout + pr.stderr
    (entry,) = _report(tmp_path, repo)["failures"]
    assert entry["test_id"] == "CPU-PyTorch-Clean-1 (whole shard)"
    assert entry["evidence"].startswith("tampered: the shard's output folder")
    assert entry["note"].startswith("2 test(s) passed here, yet")


# -- decide from the difference -----------------------------------------------------------------
COMPARE = "tests/compare/check_compare.py::"


def test_another_assertion_with_another_message_is_new(corpus) -> None:
    """Both AssertionErrors, but another assertion with another message: NEW; the same
    assertion with other numbers stays PRE-EXISTING (the control)."""
    failures, _, _, _ = corpus
    moved = failures[COMPARE + "test_stable_by_key"]
    assert (moved["category"], moved["evidence"]) == ("NEW", "AssertionError: keys must be unique")
    assert moved["note"].startswith("fails differently than on base #1")
    same = failures[COMPARE + "test_round_half_even"]
    assert (same["category"], same["evidence"]) == ("PRE-EXISTING", "assert 4 == 2")


def test_worse_than_on_base_is_new_with_both_figures(corpus) -> None:
    """2 of 4096 mismatched on the base, 417 here (max difference 0.15 -> 0.61): NEW; 2 -> 3
    (0.15 -> 0.16) stays PRE-EXISTING (the control)."""
    failures, _, texts, _ = corpus
    worse = failures[COMPARE + "test_blend_matches_reference"]
    assert worse["category"] == "NEW"
    assert worse["note"] == (
        "worse than on base #1: 417/4096 mismatched (2 there), max abs diff 0.61 (0.15 there)"
    )
    assert escape(worse["note"]) in texts["report.md"]
    about = failures[COMPARE + "test_blend_tail_matches_reference"]
    assert about["category"] == "PRE-EXISTING"


def test_a_shard_that_ran_out_of_time_because_its_tests_got_slower_is_new(corpus) -> None:
    """The tests that finished took about 1 s each against 0.02 s on the base: the PR's
    slowness, NEW, with both figures and the tests that never started; a shard timeout during a
    one-off stall, with no test slower than on the base, stays INFRA (tests/stall, the control)."""
    failures, _, _, _ = corpus
    (slow,) = [f for t, f in failures.items() if t.startswith("tests/slow/")]
    assert slow["category"] == "NEW"
    assert re.fullmatch(r"slow: \d+× slower than on base", slow["signature"])
    assert re.match(
        r"\d+× slower than on base #1: the \d+ test\(s\) that finished took", slow["note"]
    )
    assert slow["never_ran"]  # the tests after it are listed, not lost


def test_a_one_off_stall_that_passes_alone_stays_the_machines(corpus) -> None:
    """The runner's storage stalls the first write past the shard's time limit: re-run alone
    with twice the time it had had, the test passes, so the limit was the machine's: INFRA, with
    the load. (The PR's own hang, hanging again alone, is NEW: the first corpus's tests/sched.)"""
    failures, results, _, _ = corpus
    stall = failures["tests/stall/check_flush.py::test_flush_checkpoint"]
    assert stall["category"] == "INFRA"
    assert re.fullmatch(
        rf"time limit: {SHARD_TIMEOUT_S} s ran out \(load average .+\)", stall["signature"]
    )
    assert stall["evidence"].startswith(
        f"timeout: still running when the shard was killed after {SHARD_TIMEOUT_S} s"
    )
    assert stall["evidence"].endswith("; it passed when re-run alone")
    assert results["CPU-PyTorch-Stall-1"]["state"] == "ERROR"


def test_a_missing_package_is_decided_by_who_changed_the_requirements(corpus) -> None:
    """The same ModuleNotFoundError twice: the PR dropped tinyfmt from requirements.txt (NEW,
    that file the first suspect); the runner's image lost tinyplot, which the requirements
    still list, and the PR changed nothing its test imports (INFRA)."""
    failures, _, _, _ = corpus
    dropped = failures["tests/deps/check_format.py"]
    assert dropped["category"] == "NEW"
    assert dropped["note"] == "the PR's requirements.txt no longer lists 'tinyfmt'"
    assert dropped["suspects"][0] == {
        "path": "requirements.txt",
        "reason": "no longer lists 'tinyfmt'",
    }
    lost = failures["tests/deps/check_plot.py"]
    assert lost["category"] == "INFRA"
    assert lost["note"].startswith("the runner's environment lacks 'tinyplot'")


def test_machine_looking_errors_raised_through_the_prs_code_are_new(corpus) -> None:
    """ "No CUDA GPUs are available" because the PR's launcher set CUDA_VISIBLE_DEVICES=-1, a
    failed download the PR added to a test: NEW, the PR's file in the traceback the suspect.
    The same errors through unchanged code on the broken runner stay INFRA (the controls)."""
    failures, _, _, _ = corpus
    machine = "tests/machine/"
    for test_id, culprit in (
        ("check_launch.py::test_launch", "src/kit/launcher.py"),
        ("check_vocab.py::test_vocab_size", "tests/machine/check_vocab.py"),
    ):
        found = failures[machine + test_id]
        assert found["category"] == "NEW", found
        assert found["note"].endswith("raised through the PR's own code: the PR's doing")
        assert found["suspects"][0] == {"path": culprit, "reason": "in traceback"}
    for test_id, signature in (
        ("check_gpu.py::test_device_count", "GPU unavailable"),
        ("check_table.py::test_load_table", "download failed"),
    ):
        found = failures[machine + test_id]
        assert (found["category"], found["signature"]) == ("INFRA", signature), found


def test_a_test_killed_every_time_is_new_a_one_off_kill_infra(corpus) -> None:
    """The PR asks for 64 TiB: SIGKILLed, and again when re-run alone: NEW (its own doing). The
    runner's OOM killer kills another shard's test once, and it passes re-run alone: INFRA."""
    failures, _, _, _ = corpus
    every = failures["tests/oomkill/check_warm.py::test_warm"]
    assert every["category"] == "NEW"
    assert every["evidence"].endswith(
        "killed by SIGKILL during this test, and again when re-run alone"
    )
    assert every["suspects"][0]["path"] == "src/kit/tables.py"
    assert every["never_ran"] == ["tests/oomkill/check_warm.py::test_after_warm"]
    once = failures["tests/oneoff/check_small.py::test_small_preload"]
    assert (once["category"], once["signature"]) == ("INFRA", "runner killed")
    assert once["evidence"].endswith("; it passed when re-run alone")


def test_runner_leftovers_are_the_runners(corpus) -> None:
    """EADDRINUSE on a port another process holds and a truncated model in the runner's cache,
    the tests and all they import unchanged: INFRA. The PR's relay binding its own port twice
    is the same EADDRINUSE through changed code: NEW (the control)."""
    failures, _, _, _ = corpus
    for test_id in ("check_serve.py::test_serve", "check_model.py::test_load"):
        found = failures["tests/leftover/" + test_id]
        assert found["category"] == "INFRA", found
        assert found["note"].endswith("are unchanged: clean the runner, then retry")
    own = failures["tests/leftover/check_relay.py::test_start"]
    assert own["category"] == "NEW"
    assert [s["path"] for s in own["suspects"]][:1] == ["src/kit/relay.py"]


def test_the_test_that_poisoned_the_device_is_blamed(corpus) -> None:
    """The PR's scatter writes out of bounds and passes; three plain tests later a synchronise
    raises the illegal memory access. The first suspect is the scatter test (bisected: the first
    after which it fails), not the plain tests that ran just before it."""
    failures, _, _, _ = corpus
    sync = failures["tests/poison/check_c_sync.py::test_synchronize"]
    assert sync["category"] == "NEW"
    assert sync["suspects"][0] == {
        "path": "tests/poison/check_a_scatter.py::test_scatter_wraps",
        "reason": "the first earlier test after which it fails",
    }
    assert "to blame: tests/poison/check_a_scatter.py::test_scatter_wraps" in sync["evidence"]


# -- what the author reads ----------------------------------------------------------------------


def test_many_failures_of_one_cause_are_one_entry_everywhere(corpus) -> None:
    """250 tests fail with one error: one entry in the markdown, the terminal and the HTML,
    with the count; no line of ids runs on for pages (issue 44: a 2.5 MB page, a 30,000-character
    terminal line)."""
    failures, _, texts, terminal = corpus
    many = [f for t, f in failures.items() if t.startswith("tests/many/")]
    assert len(many) == 250 and {f["category"] for f in many} == {"NEW"}
    for text in (texts["report.md"], terminal):
        assert text.count("same error in 250 tests") == 1
        # the entry's first id and 8 more; in the terminal, the first signal's line names it too
        assert text.count("check_many.py::test_to_metres") <= 11 + (text is terminal)
        assert max(len(line) for line in text.splitlines()) < 2_000
    page = texts["report.html"]
    rows = [row for row in page.split('<tr class="failure-row"')[1:] if "check_many.py" in row]
    assert len(rows) == 1 and "same error in 250 tests" in rows[0]
    assert len(page) < 400_000


def test_key_lines_carry_no_terminal_escapes(corpus) -> None:
    failures, _, texts, terminal = corpus
    painted = failures["tests/output/check_output.py::test_paint"]
    assert painted["evidence"] == "RuntimeError: cannot paint 'ok': no palette"
    assert not any("\x1b" in line for line in painted["key_lines"])
    assert "\x1b" not in texts["report.md"] and "\x1b" not in terminal


def test_the_end_of_captured_output_is_kept(corpus) -> None:
    """6,000 lines of progress on stderr, then the line that says what went wrong: the key
    lines end with it (today only the first 32 KB of a test's text were kept)."""
    failures, _, _, _ = corpus
    progress = failures["tests/output/check_output.py::test_progress"]
    assert "FATAL: the last step found no output shape" in progress["key_lines"]
    assert progress["evidence"] == "ValueError: progress ended early"


# -- the base is another commit, and a verdict is final ------------------------------------------


def _git(repo, *args) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }  # fmt: skip
    done = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


HISTORY = "tests/history/check_history.py::"
RENAMED_BEFORE = "\n\ndef test_mul_by_one() -> None:\n    assert mul(7, 1) == 7\n"
RENAMED_AFTER = RENAMED_BEFORE.replace("test_mul_by_one", "test_one_is_neutral")


@pytest.fixture(scope="module")
def main_history(tmp_path_factory):
    """A repository on main: the base commit, then the off-by-one on top (which also renames a
    test, same body). #1 runs the head before its parent ever ran, #2 the parent, #3 the head
    again; #1 is rendered when it ends and again after #3."""
    tmp = tmp_path_factory.mktemp("main_history")
    repo = tmp / "repo"
    shutil.copytree(CORPUS / "base", repo)
    (repo / ".gitignore").write_text("out/\n")
    history = repo / "tests" / "history" / "check_history.py"
    history.write_text(history.read_text() + RENAMED_BEFORE)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    parent = _git(repo, "rev-parse", "HEAD")
    shutil.copy(CORPUS / "pr" / "src" / "kit" / "calc.py", repo / "src" / "kit" / "calc.py")
    history.write_text(history.read_text().replace(RENAMED_BEFORE, RENAMED_AFTER))
    _git(repo, "commit", "-qam", "the off-by-one, and a clearer name for a test")

    def run(*args):
        done = _run(
            tmp, repo, "--branch", "main", *args, out=tmp / "o", stages="CPU-PyTorch-History-1"
        )
        assert done.returncode in (0, 1), done.stdout + done.stderr
        return done

    first = run()
    report_1 = _report(tmp, repo, "--pipeline", "1")
    _git(repo, "checkout", "-q", parent)
    assert run("--commit", parent).returncode == 0
    _git(repo, "checkout", "-q", "main")
    run()
    return parent, first.stdout, report_1, _report(tmp, repo, "--pipeline", "3"), tmp, repo


def test_on_the_default_branch_the_base_is_the_parent(main_history) -> None:
    """A clean commit on main is compared with its parent's pipeline, never with a pipeline on
    itself: #3 (the same commit as #1) is NEW against the parent's #2, not PRE-EXISTING against
    #1; before the parent ran, the report names the parent as the base to run first."""
    parent, first, _, report_3, _, _ = main_history
    assert f"on {parent[:7]} (its parent)" in first
    entry = {f["test_id"]: f for f in report_3["failures"]}[HISTORY + "test_mul"]
    assert (entry["category"], entry["note"][:21]) == ("NEW", "passed on base #2 in ")


def test_a_renamed_test_keeps_its_history(main_history) -> None:
    """The PR renamed test_mul_by_one (same body): compared with the old name's pass on the
    base, NEW, not UNCLASSIFIED for a test the base never ran; test_mul (not renamed) is the
    control above."""
    _, _, _, report_3, _, _ = main_history
    entry = {f["test_id"]: f for f in report_3["failures"]}[HISTORY + "test_one_is_neutral"]
    assert entry["category"] == "NEW"
    assert entry["note"].startswith("passed on base #2 as test_mul_by_one (renamed, same body) in ")


def test_a_pipelines_verdict_is_final(main_history) -> None:
    """#1 ended UNCLASSIFIED (no base): rendered again after #2 and #3 ran, it still is."""
    _, _, report_1, _, tmp, repo = main_history
    again = _report(tmp, repo, "--pipeline", "1")
    assert [f["category"] for f in report_1["failures"]] == ["UNCLASSIFIED"] * 2
    assert [f["category"] for f in again["failures"]] == ["UNCLASSIFIED"] * 2
    assert again["base_pipeline"] is None
