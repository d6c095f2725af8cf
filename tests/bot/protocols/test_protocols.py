"""Each string another program parses has one formatter and one parser (bot/protocols/names.py,
harness/report/status_text.py): what one writes the other reads back, and the parser rejects
the near-misses."""

from __future__ import annotations

import pytest

from stagebot.bot.protocols import names
from stagebot.harness.report import status_text

DIGEST = "ab" * 32


@pytest.mark.parametrize(("pr", "pipeline", "plan_run"), [(7, 101, 555), (None, 3, 9), (1, 1, 1)])
def test_a_stage_run_title_reads_back(pr, pipeline, plan_run) -> None:
    title = names.stage_title(pr, pipeline, plan_run, 2)
    assert names.parse_title(title) == (names.stage_key(pr), pipeline, plan_run)
    assert title.endswith(" part 2")  # a pipeline's stage runs have titles of their own


@pytest.mark.parametrize(
    "title",
    [
        pytest.param("stagebot pr-7 pipeline 101 plan-run 555 ", id="trailing space"),
        pytest.param("stagebot pr-0 pipeline 101 plan-run 555", id="PR 0"),
        pytest.param("stagebot pr-7 pipeline 0101 plan-run 555", id="leading zero"),
        pytest.param("stagebot dev pipeline 1 plan-run 2", id="another key"),
        pytest.param("x stagebot pr-7 pipeline 1 plan-run 2", id="not at the start"),
        pytest.param("stagebot pr-7 pipeline 1 plan-run 2\nstagebot", id="a second line"),
        pytest.param("stagebot pr-7 pipeline 1 plan-run 2 part 0", id="part 0"),
        pytest.param("stagebot pr-7 pipeline 1 plan-run 2 part", id="part without number"),
        pytest.param("", id="empty"),
    ],
)
def test_the_title_parser_rejects_near_misses(title) -> None:
    assert names.parse_title(title) is None


def test_artifact_names_read_back() -> None:
    assert names.result_stage(names.result_artifact("CPU-PyTorch-1")) == "CPU-PyTorch-1"
    assert names.ledger_digest(names.ledger_artifact(DIGEST)) == DIGEST


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(names.MAIN_LEDGER, id="main's ledger is no PR ledger"),
        pytest.param(names.LEDGER_PREFIX + DIGEST[:-1], id="63 digits"),
        pytest.param(names.LEDGER_PREFIX + DIGEST.upper(), id="upper case"),
        pytest.param(names.LEDGER_PREFIX + DIGEST + "0", id="65 digits"),
        pytest.param(names.PLAN_ARTIFACT, id="the plan"),
    ],
)
def test_the_ledger_artifact_parser_rejects_other_names(name) -> None:
    assert names.ledger_digest(name) is None


@pytest.mark.parametrize("name", [names.RESULT_PREFIX, names.PLAN_ARTIFACT, "result-CPU-PyTorch-1"])
def test_the_result_artifact_parser_rejects_other_names(name) -> None:
    assert names.result_stage(name) is None


def test_a_ledger_artifact_is_named_by_a_digest_only() -> None:
    with pytest.raises(ValueError, match="64 hex digits"):
        names.ledger_artifact("main")


@pytest.mark.parametrize(
    "description",
    [
        status_text.running(12, "abc1234"),
        status_text.gave_up(12),
        status_text.pipeline_status(12, "passed on abc1234"),
    ],
)
def test_a_pipelines_status_names_its_pipeline(description) -> None:
    assert status_text.status_pipeline(description) == 12
    assert status_text.owns(description, 12) and not status_text.owns(description, 1)


@pytest.mark.parametrize(
    "description",
    [
        pytest.param(status_text.skipped("maintainer", "docs only"), id="a person's skip"),
        pytest.param(status_text.validated(12, "maintainer"), id="a person's reuse of #12"),
        pytest.param("PR_Github #12", id="no text after the label"),
        pytest.param("PR_Github #012 passed", id="leading zero"),
        pytest.param(" PR_Github #12 passed", id="not at the start"),
        pytest.param("PR_Github #12x passed", id="not a number"),
    ],
)
def test_the_status_parser_gives_no_owner_to_anything_else(description) -> None:
    """A person's status mentions a pipeline without owning the status: no report may
    overwrite it (it outranks every pipeline)."""
    assert status_text.status_pipeline(description) is None
    assert status_text.outranks(description, 10**6)


def test_only_a_newer_pipelines_status_outranks() -> None:
    assert status_text.outranks(status_text.running(13, "abc1234"), 12)
    assert not status_text.outranks(status_text.running(12, "abc1234"), 12)
    assert not status_text.outranks(status_text.running(11, "abc1234"), 12)
