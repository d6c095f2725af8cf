"""Attack test (issue 13, finding 7): `bot publish` reads the status, then writes it. Another
writer landing in between (a newer pipeline's plan job, a maintainer's skip) must end on top:
the fake GitHub interleaves the second writer right after the report job's read."""

# ruff: noqa: F401, F811 - pytest fixtures imported from the helper that defines them
from __future__ import annotations

import pytest
from helpers.fake_pr import SHA, status
from helpers.workflow_jobs import gh, jobs

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "between",
    [
        pytest.param(f"PR_Github #102 is running on {SHA[:7]}", id="a newer pipeline's pending"),
        pytest.param("Skipped by @maintainer: docs only", id="a maintainer's skip"),
    ],
)
def test_a_status_written_between_read_and_write_stays_on_top(gh, jobs, between) -> None:
    outputs = jobs.handle_comment("/bot run", 101)
    results = jobs.stage_jobs(outputs, 101)
    state = "pending" if between.startswith("PR_Github") else "success"
    gh.after("list_statuses", lambda: gh.post_status(SHA, state, "stagebot", between))
    text = jobs.publish(101, results)
    assert status(gh)["description"] == between, [s["description"] for s in gh.statuses[SHA]]
    assert "which landed in between" in text


def test_an_older_pipelines_status_in_between_is_not_restored(gh, jobs) -> None:
    outputs = jobs.handle_comment("/bot run", 101)
    results = jobs.stage_jobs(outputs, 101)
    older = f"PR_Github #100 failed: {SHA[:7]}"
    gh.after("list_statuses", lambda: gh.post_status(SHA, "failure", "stagebot", older))
    jobs.publish(101, results)
    assert status(gh)["description"].startswith("PR_Github #101 passed")


def test_a_persons_reuse_naming_this_pipeline_is_not_taken_for_its_own(gh, jobs) -> None:
    """`Validated by PR_Github #101 …` (a person's reuse-pipeline) names pipeline #101 but is
    not #101's status: only a description that begins with the label is a pipeline's own
    (harness/report/status_text.py), so #101's report leaves it alone."""
    outputs = jobs.handle_comment("/bot run", 101)
    results = jobs.stage_jobs(outputs, 101)
    reuse = "Validated by PR_Github #101 (reuse-pipeline by @maintainer)"
    gh.post_status(SHA, "success", "stagebot", reuse)
    text = jobs.publish(101, results)
    assert status(gh)["description"] == reuse, [s["description"] for s in gh.statuses[SHA]]
    assert "belongs to another pipeline" in text
