"""A local `bot run` speaks of this machine: no PR, no status, no comments; the terminal gets plain
text, the markdown file stays GitHub's; the base is found from the merge-base (or an unambiguous
--base-commit prefix) and named; the HTML report links its files."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from fixtures.botrun import CATALOG, bot, results, run_stages

from stagebot.harness.analysis.classify import analyse
from stagebot.harness.ledger.book import Ledger
from stagebot.harness.report import Report, render_report
from stagebot.harness.results import StageResult
from stagebot.harness.results import TestOutcome as Outcome

GITHUB_WORDS = ("PR_Github", "The PR's status", "comment `/bot run`", "comment plain")


def test_a_local_run_speaks_local_and_prints_plain_text(tmp_path) -> None:
    ledger = tmp_path / "ledger.sqlite"
    done = run_stages(ledger, tmp_path / "out", "CPU-PyTorch-Fail-1")
    assert done.returncode == 1, done.stdout + done.stderr
    terminal = done.stdout + done.stderr
    for words in GITHUB_WORDS:
        assert words not in terminal, words
    assert "pipeline #1 [ run ] triggered by" in terminal
    assert "pipeline #1 [ run ] completed with state FAILURE (Partly Tested)" in terminal
    options = f"--catalog {CATALOG} --ledger {ledger} --commit c0ffee"
    again = f"Run `bot run {options} '/bot run --stage-list CPU-PyTorch-Fail-1'` again"
    assert f"{again} (its ledger: {ledger})" in terminal
    # plain text: no HTML of the markdown, no entities (the test's "[1, 2, 3]" reads as it is)
    for markup in ("<details", "<summary", "<pre>", "<code>", "&#", "&lt;", "\u200b"):
        assert markup not in done.stdout, markup
    assert "sum of [1, 2, 3] should be 7" in done.stdout
    markdown = (tmp_path / "out" / "report.md").read_text()  # the file stays GitHub's markdown
    assert "<details" in markdown and "&#91;1, 2, 3&#93;" in markdown
    again = bot("report", "--ledger", str(ledger), "--format", "text")
    assert again.returncode == 0 and "<details" not in again.stdout
    assert f"{options} '/bot run --stage-list CPU-PyTorch-Fail-1'` again" in again.stdout


def test_a_comment_that_selects_nothing_says_so_and_records_nothing(tmp_path) -> None:
    ledger = tmp_path / "ledger.sqlite"
    done = run_stages(ledger, tmp_path / "out", "CPU-PyTorch-1", "--gpu-type H200")
    assert done.returncode == 4, done.stdout + done.stderr
    assert done.stderr == (
        "nothing ran: no stage is selected: nothing will run; the gpu-type step removed the "
        "last (--gpu-type keeps stages on H200)\n"
    )
    assert "passed" not in done.stdout  # never "Everything that ran passed"
    with Ledger.open(ledger, readonly=True) as book:
        assert book.latest_number() is None


def report(gating: bool = False, local: bool = False, reason: str | None = None) -> Report:
    ran = StageResult(
        stage="CPU-PyTorch-1", shard=1, shards=1, state="SUCCESS", started_at=None,
        finished_at=None, duration_s=1.0, gpu_type="CPU", gpus=[],
        tests=[Outcome("t/test_a.py::ok", "passed", 1.0)],
    )  # fmt: skip
    return Report(
        pipeline=3, commit="c0ffee", pr=None, command="/bot run --stage-list 'CPU-PyTorch-1'",
        state="SUCCESS", gating=gating, partly_tested_reason=reason, started_at=None,
        finished_at=None, results=[ran], analysis=analyse([ran]), local=local,
    )  # fmt: skip


@pytest.mark.parametrize("fmt", ["md", "html", "text"])
def test_a_local_gating_run_that_could_not_run_everything_sets_no_status(fmt: str) -> None:
    not_run = StageResult(
        stage="H200-PyTorch-1", shard=1, shards=1, state="NOT_RUN", started_at=None,
        finished_at=None, duration_s=0.0, gpu_type="H200", gpus=[], evidence="needs 1 x H200",
    )  # fmt: skip
    gating = report(gating=True, local=True)
    results = [*gating.results, not_run]
    text = render_report(replace(gating, results=results, analysis=analyse(results)), fmt)
    assert "Not a pass:</b> 1 shard(s) did not run here" in text.replace("**", "</b>")
    assert "status" not in text and "PR_Github" not in text, text


@pytest.mark.parametrize("local", [False, True])
@pytest.mark.parametrize("fmt", ["md", "html", "text"])
def test_partly_tested_is_explained_once(local: bool, fmt: str) -> None:
    from fixtures.botrun import CATALOG

    from stagebot.bot.comments.grammar import parse_comment
    from stagebot.stages.catalog import load_catalog
    from stagebot.stages.planner import plan_run

    comment = parse_comment('/bot run --stage-list "CPU-PyTorch-1"')
    plan = plan_run(comment, load_catalog(CATALOG), commit="c0ffee")
    text = render_report(report(local=local, reason=plan.partly_tested_reason), fmt)
    assert text.count("default selection") == 1, text
    assert text.count("does not set") == 1, text


def test_the_infra_header_says_what_its_entries_say() -> None:
    environment = (
        "environment: /venv/bin/python has no pytest (No module named pytest): install stagebot "
        "with its [harness] extra (pip install 'stagebot[harness]')"
    )

    def errored(stage: str, evidence: str) -> StageResult:
        return StageResult(
            stage=stage, shard=1, shards=1, state="ERROR", started_at=None, finished_at=None,
            duration_s=0.1, gpu_type="CPU", gpus=[], log_path="log.txt", evidence=evidence,
        )  # fmt: skip

    def header(*shards: StageResult) -> str:
        infra = replace(report(gating=True), results=list(shards), analysis=analyse(list(shards)))
        text = render_report(infra, "md")
        return next(line for line in text.splitlines() if "<b>INFRA</b>" in line)

    alone = header(errored("CPU-PyTorch-1", environment))
    assert "fix it first" in alone and "retry" not in alone, alone
    crash = header(errored("CPU-PyTorch-2", "crashed: pytest killed by SIGKILL"))
    assert "retry" in crash and "environment" not in crash, crash
    both = header(
        errored("CPU-PyTorch-1", environment),
        errored("CPU-PyTorch-2", "crashed: pytest killed by SIGKILL"),
    )
    assert "fix the environment of CPU-PyTorch-1 first" in both and "retry" in both, both


def test_the_html_report_links_the_log_and_the_test_files(tmp_path) -> None:
    failed = StageResult(
        stage="CPU-PyTorch-1", shard=1, shards=1, state="FAILURE", started_at=None,
        finished_at=None, duration_s=1.0, gpu_type="CPU", gpus=[],
        log_path="out/pipeline-3/CPU-PyTorch-1/log.txt",
        tests=[Outcome("t/test_a.py::broken", "failed", 1.0, "AssertionError: no")],
    )  # fmt: skip
    page = replace(report(), results=[failed], analysis=analyse([failed]), root=tmp_path)
    html = render_report(page, "html")
    log = (tmp_path / "out/pipeline-3/CPU-PyTorch-1/log.txt").as_uri()
    assert f'<a href="{log}">full log</a>' in html, html
    assert f'<a href="{(tmp_path / "t/test_a.py").as_uri()}"><code>t/test_a.py::broken' in html


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path) -> Path:
    """main: one commit; feature: one more on top of it."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for name in ("base", "feature"):
        (repo / f"{name}.txt").write_text(name)
        git(repo, "add", f"{name}.txt")
        git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", name)
        if name == "base":
            git(repo, "checkout", "-q", "-b", "feature")
    return repo


def finished(book: Ledger, commit: str, state: str = "SUCCESS") -> int:
    number = book.start_pipeline(command={"name": "run"}, commit=commit)
    book.finish_pipeline(number, state)
    return number


def test_a_local_run_compares_with_the_merge_base_with_main(tmp_path, repo) -> None:
    from stagebot.harness.pipeline.base import base_target, local_base

    base, head = git(repo, "rev-parse", "main"), git(repo, "rev-parse", "feature")
    with Ledger.open(tmp_path / "l.sqlite") as book:
        on_base = finished(book, base)
        finished(book, "0ther0ne")  # newer, on another commit: not the base
        running = finished(book, head)
        wanted, how = base_target(book, None, f"{head}+dirty.abc", repo, "main")
        assert (wanted, how) == (base, "the merge-base with main")
        chosen, note = local_base(
            book, base_book=None, wanted=wanted, how=how, default_branch="main", exclude=running
        )
    assert chosen.pipeline == on_base
    assert note == f"pipeline #{on_base} on {base[:7]} (the merge-base with main)"


def test_without_a_base_pipeline_the_report_says_why(tmp_path, repo) -> None:
    from stagebot.harness.pipeline.base import base_target, local_base

    head = git(repo, "rev-parse", "feature")
    with Ledger.open(tmp_path / "l.sqlite") as book:
        wanted, how = base_target(book, None, head, repo, "main")
        chosen, note = local_base(
            book, base_book=None, wanted=wanted, how=how, default_branch="main", exclude=1
        )
    assert chosen.pipeline is None
    assert note.startswith(f"no pipeline: the ledger {tmp_path / 'l.sqlite'} has no finished")
    assert f"on {wanted[:7]} (the merge-base with main) or on main" in note


def test_base_commit_takes_any_unambiguous_prefix(tmp_path, repo) -> None:
    from stagebot.harness.pipeline.base import base_target, local_base

    base = git(repo, "rev-parse", "main")
    with Ledger.open(tmp_path / "l.sqlite") as book:
        number = finished(book, base)
        for prefix in (base[:7], base[:12], base):
            assert base_target(book, prefix, None, repo, "main") == (base, "--base-commit")
        chosen, note = local_base(
            book, base_book=None, wanted=base, how="--base-commit", default_branch="main",
            exclude=number + 1,
        )  # fmt: skip
        assert chosen.pipeline == number
        assert note == f"pipeline #{number} on {base[:7]} (--base-commit)"
        # a commit git knows but the ledger does not: resolved by git
        feature = git(repo, "rev-parse", "feature")
        assert base_target(book, feature[:8], None, repo, "main")[0] == feature


def test_an_ambiguous_or_unknown_base_commit_is_an_error(tmp_path, repo) -> None:
    from stagebot.harness.pipeline.base import BaseCommitError, base_target

    with Ledger.open(tmp_path / "l.sqlite") as book:
        finished(book, "abc1230000")
        finished(book, "abc1239999")
        with pytest.raises(BaseCommitError, match="ambiguous: .* abc1230000, abc1239999"):
            base_target(book, "abc123", None, repo, "main")
        with pytest.raises(BaseCommitError, match="--base-commit fedcba9: no pipeline"):
            base_target(book, "fedcba9", None, repo, "main")


def test_bot_run_refuses_an_unknown_base_commit_before_anything_runs(tmp_path) -> None:
    ledger = tmp_path / "ledger.sqlite"
    done = run_stages(ledger, tmp_path / "out", "CPU-PyTorch-1", extra=["--base-commit", "fedcba9"])
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("Error: --base-commit fedcba9: no pipeline"), done.stderr
    assert results(tmp_path / "out") == {}
    with Ledger.open(ledger, readonly=True) as book:
        assert book.latest_number() is None
