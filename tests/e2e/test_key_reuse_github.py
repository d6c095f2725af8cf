"""Reuse by dependency key across PRs, as the three workflows run it on the fake GitHub (real
PyGithub over HTTP; every job in an empty folder, the ledgers travelling as artifacts): the plan
job offers the trusted passed runs (the PR's own ledger, and main's ledger the bot vouched for),
`bot run-stage` (a real process) checks the keys and deselects, the report job records and
replies.

The trust rule: a PR's own results are reused by that PR only, never by another (an untrusted PR
must not plant a pass for someone else); main's post-merge results are reused by every PR."""

# ruff: noqa: F401, F811 - pytest fixtures imported from the helper that defines them
from __future__ import annotations

import io
import json
import zipfile

import pytest
from helpers.fake_pr import BOT, PR
from helpers.workflow_jobs import Jobs, gh, jobs

from stagebot.harness.ledger.book import Ledger
from stagebot.harness.reuse.offers import KEYS_FILE

pytestmark = pytest.mark.slow

OTHER_PR = 8
TESTS = 6  # check_basic.py's test cases, all passing


def ran(jobs: Jobs, report_run: int, pipeline: int) -> tuple[int, dict[int, int]]:
    """(tests pipeline ``pipeline`` executed, {source pipeline: tests reused from it by key}),
    read from the ledger its report run uploaded."""
    gh = jobs.gh
    (artifact,) = [a for a in gh.artifacts.values() if a["workflow_run"]["id"] == report_run]
    path = jobs.tmp / f"ledger-{pipeline}.sqlite"
    with zipfile.ZipFile(io.BytesIO(gh.blobs[artifact["id"]])) as archive:
        path.write_bytes(archive.read("ledger.sqlite"))
    with Ledger.open(path, readonly=True) as book:
        record = book.pipeline(pipeline)
        executed = sum(len(r.tests) for r in record.results if r.stage.startswith("CPU-PyTorch"))
        return executed, {source: n for source, _, n in record.key_reuses}


def reply(jobs: Jobs, pr: int, pipeline: int) -> str:
    (body,) = [c["body"] for c in jobs.gh.bot_comments(pr, BOT) if f"#{pipeline}" in c["body"]]
    return body


def run(jobs: Jobs, pipeline: int, pr: int = PR, head: str | None = None) -> int:
    """A `/bot run` comment on ``pr`` (its head moved to ``head`` first: a rebase, a new commit
    of the same code here) through plan, stage run and report; the report run's id."""
    if head is not None:
        jobs.gh.pulls[pr]["head"]["sha"] = head
    jobs.whole("/bot run", pipeline, pr=pr)
    return 60000 + pipeline


def test_a_prs_results_are_reused_by_that_pr_only_and_mains_by_every_pr(gh, jobs) -> None:
    gh.add_pull(OTHER_PR, head_sha="b0" + "0" * 38, files=("src/x.py",))

    assert ran(jobs, run(jobs, 101), 101) == (TESTS, {})  # PR A runs and passes
    # PR B, the same code: does not reuse PR A's passes, runs them
    assert ran(jobs, run(jobs, 102, pr=OTHER_PR), 102) == (TESTS, {})
    assert "reused by key" not in reply(jobs, OTHER_PR, 102)
    # PR A rebased: a new commit, so nothing is reused by commit; by key, its own passes stand
    assert ran(jobs, run(jobs, 103, head="a1" + "0" * 38), 103) == (0, {101: TESTS})
    line = f"Reuse: {TESTS} tests reused by key (from PR_Github #101 of this PR)."
    assert line in reply(jobs, PR, 103)

    outputs = jobs.push(104)  # main's post-merge pipeline trusts no PR: it runs them
    jobs.report(jobs.stages(outputs), 104)
    assert ran(jobs, 60104, 104) == (TESTS, {})
    # main's passes are reused by both PRs
    assert ran(jobs, run(jobs, 105, pr=OTHER_PR, head="b1" + "0" * 38), 105) == (0, {104: TESTS})
    line = f"Reuse: {TESTS} tests reused by key (from PR_Github #104 on main)."
    assert line in reply(jobs, OTHER_PR, 105)
    assert ran(jobs, run(jobs, 106, head="a2" + "0" * 38), 106) == (0, {104: TESTS})


def test_a_stage_job_cannot_claim_another_prs_pass_as_reused(gh, jobs) -> None:
    """PR B's stage job runs PR B's code, which can write its keys.json: it claims PR A's
    passes as reused by key and drops the tests from its result. The report job checks every
    claim against the ledger's trusted lookup: refused, the tests are errors, not passes."""
    gh.add_pull(OTHER_PR, head_sha="b0" + "0" * 38, files=("src/x.py",))
    run(jobs, 101)
    outputs = jobs.plan("/bot run", 102, pr=OTHER_PR)
    folder = jobs.job("stage") / "results"
    for entry in json.loads(outputs["matrix"]):
        jobs.run_stage(entry, folder)
        shard = folder / entry["stage"]
        if entry["stage"] == "CPU-PyTorch-1":
            result = json.loads((shard / "result.json").read_text())
            claimed = {t["test_id"]: [101, 0.1] for t in result["tests"]}
            keys = json.loads((shard / KEYS_FILE).read_text())
            (shard / KEYS_FILE).write_text(json.dumps({**keys, "reused": claimed}))
            (shard / "result.json").write_text(json.dumps({**result, "tests": []}))
        jobs.upload_results(outputs["stage_run"], entry["stage"], folder)
    gh.runs[outputs["stage_run"]].update(status="completed", conclusion="success")
    jobs.report(outputs["stage_run"], 102)
    assert ran(jobs, 60102, 102) == (TESTS, {})  # the claimed tests are recorded, as errors
    body = reply(jobs, OTHER_PR, 102)
    assert "completed with state FAILURE" in body and "Reuse:" not in body
    assert "skipped it as reused by key, but the ledger does not offer" in body


def test_mains_pipeline_runs_a_sample_of_what_it_would_reuse_and_says_so(gh, jobs) -> None:
    """A post-merge pipeline's stage jobs run a seeded sample (``reuse_audit_rate``, default
    0.05: one of six) of the tests they would reuse by key; the result is the
    ``stagebot/reuse-audit`` status of the commit (a post-merge pipeline has no reply)."""
    outputs = jobs.push(104)
    jobs.report(jobs.stages(outputs), 104)
    assert ran(jobs, 60104, 104) == (TESTS, {})
    assert "stagebot/reuse-audit" not in {s["context"] for s in gh.statuses[outputs["commit"]]}

    later = "c1" + "0" * 38  # main's next commit, the same code
    outputs = jobs.push(105, sha=later)
    shards = [s for s in json.loads(outputs["matrix"]) if s["key_reuse"]]  # the test shard
    assert [shard["key_reuse"]["audit"] for shard in shards] == [[0.05, 105]]
    _, log = jobs.report(jobs.stages(outputs), 105)
    assert ran(jobs, 60105, 105) == (1, {104: TESTS - 1})  # the sampled one ran for real
    (status,) = [s for s in gh.statuses[later] if s["context"] == "stagebot/reuse-audit"]
    assert (status["state"], status["description"]) == (
        "success",
        "Reuse audit: 1 sampled, 0 disagreed",
    )
    assert "Reuse audit: 1 sampled, 0 disagreed (stagebot/reuse-audit status: success)" in log
