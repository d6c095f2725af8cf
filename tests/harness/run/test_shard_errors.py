"""An ERROR shard records what happened: its cause line, then the end of its log (pytest's stderr
included); a cause in the environment (no pytest, a missing module, an interpreter that cannot
start) is named as such, and the report says to fix it rather than to re-run."""

# ruff: noqa: F401, F811 - pytest fixtures imported from the helper that defines them
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers.fake_pr import replies
from helpers.shards import entry
from helpers.workflow_jobs import Jobs, gh

from stagebot.harness.analysis.classify import analyse
from stagebot.harness.report import Report, render_report
from stagebot.harness.results import StageResult
from stagebot.harness.run.collect import CollectError, collect_tests
from stagebot.harness.run.shard import ShardContext, run_shard
from stagebot.stages.plan import MatrixEntry

ROOT = Path(__file__).resolve().parents[3]
PASSING = "def test_ok():\n    assert True\n"


def python_without_site(tmp_path: Path) -> str:
    """An interpreter that cannot import pytest (no site-packages), as a fresh core install."""
    wrapper = tmp_path / "bin" / "python"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def shard(tmp_path: Path, suite: str = PASSING, python: str = sys.executable, conftest=None):
    root = tmp_path / "repo"
    root.mkdir()
    (root / "check_suite.py").write_text(suite)
    if conftest:
        (root / "conftest.py").write_text(conftest)
    context = ShardContext(out_dir=tmp_path / "out", root=root, python=python)
    return run_shard(entry(), context)


def test_no_pytest_is_an_environment_error_with_the_log_tail(tmp_path) -> None:
    result = shard(tmp_path, python=python_without_site(tmp_path))
    assert result.state == "ERROR"
    cause, tail = result.evidence.split("\n", 1)
    assert cause.startswith("environment: ") and "has no pytest" in cause, cause
    assert "[harness] extra" in cause
    assert "No module named pytest" in tail


def test_an_interpreter_that_cannot_start_is_an_environment_error(tmp_path) -> None:
    result = shard(tmp_path, python=str(tmp_path / "no" / "python"))
    assert result.state == "ERROR"
    assert result.evidence.startswith("environment: cannot start the shard's Python "), result


def test_a_module_the_repository_lacks_is_an_environment_error(tmp_path) -> None:
    result = shard(tmp_path, conftest="import not_installed_anywhere_xyz\n")
    assert result.state == "ERROR"
    assert result.evidence.startswith("environment: module 'not_installed_anywhere_xyz'")


def test_a_conftest_error_keeps_the_tracebacks_last_lines(tmp_path) -> None:
    conftest = "def helper():\n    raise RuntimeError('boom in collection')\n\nhelper()\n"
    result = shard(tmp_path, conftest=conftest)
    assert result.state == "ERROR"
    cause, tail = result.evidence.split("\n", 1)
    assert not cause.startswith("environment:"), cause
    assert "RuntimeError: boom in collection" in tail
    assert "conftest.py:2: in helper" in tail, tail


def test_an_internal_error_keeps_the_internalerror_lines(tmp_path) -> None:
    conftest = "def pytest_collection_modifyitems(items):\n    raise ValueError('plugin boom')\n"
    result = shard(tmp_path, conftest=conftest)
    assert result.state == "ERROR"
    cause, tail = result.evidence.split("\n", 1)
    assert cause.startswith("pytest ended with an internal error (exit 3)"), cause
    assert "INTERNALERROR" in tail and "plugin boom" in tail, tail


def test_collecting_a_family_without_pytest_says_so(tmp_path) -> None:
    (tmp_path / "check_suite.py").write_text(PASSING)
    with pytest.raises(CollectError) as raised:
        collect_tests(entry(), tmp_path, python=python_without_site(tmp_path))
    cause, tail = str(raised.value).split("\n", 1)
    assert cause.startswith("environment: ") and "No module named pytest" in tail


def errored(evidence: str, log_path: str | None = "out/pipeline-1/CPU-PyTorch-1/log.txt"):
    return StageResult(
        stage="CPU-PyTorch-1", shard=1, shards=1, state="ERROR", started_at=None,
        finished_at=None, duration_s=0.1, gpu_type="CPU", gpus=[], log_path=log_path,
        evidence=evidence,
    )  # fmt: skip


def report_of(result: StageResult, log_links: dict[str, str] | None = None) -> Report:
    analysis = analyse([result], log_links=log_links)
    return Report(
        pipeline=1, commit="c0ffee", pr=None, command="/bot run", state=analysis.state,
        gating=True, partly_tested_reason=None, started_at=None, finished_at=None,
        results=[result], analysis=analysis,
    )  # fmt: skip


ENVIRONMENT = (
    "environment: /venv/bin/python has no pytest (No module named pytest): install stagebot "
    "with its [harness] extra (pip install 'stagebot[harness]')\n"
    "$ /venv/bin/python -m pytest check_suite.py\n/venv/bin/python: No module named pytest"
)


def test_the_report_shows_an_errored_shards_cause_log_path_and_log_tail() -> None:
    report = report_of(errored(ENVIRONMENT))
    assert report.exit_code == 3
    text = render_report(report, "md")
    assert "has no pytest" in text and "out/pipeline-1/CPU-PyTorch-1/log.txt" in text
    assert "/venv/bin/python: No module named pytest" in text  # a key line of the log's tail
    row = next(line for line in text.splitlines() if line.startswith("| CPU-PyTorch-1 |"))
    assert "No module named pytest</" not in row  # the table's note is the cause line only


def test_an_environment_error_is_not_advised_a_retry() -> None:
    text = render_report(report_of(errored(ENVIRONMENT)), "md")
    headline = text.splitlines()[0]
    assert "environment" in headline and "to retry" not in headline, headline
    assert "Fix the environment of CPU-PyTorch-1 first" in text


def test_a_crash_is_still_advised_a_retry() -> None:
    text = render_report(report_of(errored("crashed: pytest killed by SIGKILL\nKilled")), "md")
    assert "comment `/bot run` to retry" in text.splitlines()[0]
    assert "Fix the environment" not in text


def test_on_github_the_report_links_the_stage_jobs_log() -> None:
    url = "https://github.com/octo-org/octo-repo/actions/runs/50101/job/7"
    text = render_report(report_of(errored(ENVIRONMENT), {"CPU-PyTorch-1": url}), "md")
    assert f'<a href="{url}">full log</a>' in text


@pytest.mark.slow
def test_on_github_the_reply_names_the_environment_and_shows_the_full_log(
    gh, tmp_path, monkeypatch, capsys
) -> None:
    jobs = Jobs(gh, tmp_path, monkeypatch, capsys)
    outputs = jobs.plan("/bot run", 101)
    stage_run, results = outputs["stage_run"], tmp_path / "results"
    python = python_without_site(tmp_path)
    for raw in json.loads(outputs["matrix"]):
        shard_entry = MatrixEntry.from_json(raw)
        context = ShardContext(out_dir=results / shard_entry.stage, root=ROOT, python=python)
        run_shard(shard_entry, context)
        jobs.upload_results(stage_run, shard_entry.stage, results)
    gh.runs[stage_run].update(status="completed", conclusion="failure")
    jobs.report(stage_run, 101)
    (reply,) = replies(gh)
    body = reply["body"]
    assert "could not run in their environment" in body and "to retry" not in body, body
    assert "has no pytest" in body and "full log" in body
