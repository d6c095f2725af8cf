"""The promise of the reuse policy (`/bot reuse-pipeline [N]`), stated as a property over every
way a pipeline can end (issue 50): N validates another commit only when it ended SUCCESS, was
gating and ran every stage it planned; a refusal records nothing, an acceptance records one
SUCCESS pipeline validated by N; by default N is the PR's newest such pipeline."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from stagebot.harness.ledger.book import Ledger
from stagebot.harness.ledger.pipelines import FINAL_STATES
from stagebot.harness.results import STATES, StageResult
from stagebot.harness.reuse.policy import record_validation

RUN = {"version": 1, "command": "run", "options": {}}
SOURCE = st.tuples(
    st.sampled_from(FINAL_STATES),
    st.booleans(),  # gating
    st.lists(st.sampled_from(STATES), max_size=5),  # its stages' states
)


def finished(book: Ledger, state: str, gating: bool, stages: list[str], pr: int = 3) -> int:
    number = book.start_pipeline(command=RUN, commit=f"c{state}", plan={"gating": gating}, pr=pr)
    for index, stage_state in enumerate(stages):
        result = StageResult(f"S-{index}", 1, 1, stage_state, None, None, 1.0, "CPU", [], [])
        book.record_result(number, result)
    book.finish_pipeline(number, state)
    return number


def may_validate(state: str, gating: bool, stages: list[str]) -> bool:
    return state == "SUCCESS" and gating and "NOT_RUN" not in stages


def refusal(number: int, state: str, gating: bool, stages: list[str]) -> str:
    """Why pipeline ``number`` may not validate: the first rule it breaks, in the policy's order."""
    if state != "SUCCESS":
        return f"pipeline #{number} ended {state}; run `/bot run`"
    if not gating:
        return f"pipeline #{number} was a partial run (Partly Tested): it cannot validate; run"
    not_run = [f"S-{index}" for index, stage in enumerate(stages) if stage == "NOT_RUN"]
    listed = ", ".join(not_run[:3]) + (", …" if len(not_run) > 3 else "")
    return f"pipeline #{number} did not run {len(not_run)} stage(s) ({listed}): it cannot validate"


@settings(max_examples=80, deadline=None)
@given(source=SOURCE)
@example(source=("SUCCESS", True, ["NOT_RUN"] * 3))
@example(source=("SUCCESS", True, ["SUCCESS", "NOT_RUN", "NOT_RUN", "NOT_RUN", "NOT_RUN"]))
def test_a_pipeline_validates_only_when_it_passed_gating_and_whole(tmp_path_factory, source):
    with Ledger.open(tmp_path_factory.mktemp("ledger") / "ledger.sqlite") as book:
        number = finished(book, *source)
        validation = record_validation(book, "head", number, pr=3)
        assert validation.ok == may_validate(*source), validation.reason
        if validation.ok:
            record = book.pipeline(validation.pipeline)
            assert (record.state, record.commit, record.validated_by) == ("SUCCESS", "head", number)
            assert validation.reason == f"validated by #{number}"
            assert (validation.source, validation.source_commit) == (number, f"c{source[0]}")
        else:
            assert validation.pipeline is None and book.latest_number() == number
            assert validation.reason.startswith(refusal(number, *source)), validation.reason


@settings(max_examples=60, deadline=None)
@given(sources=st.lists(st.tuples(SOURCE, st.sampled_from([3, 4])), min_size=1, max_size=5))
def test_by_default_the_prs_newest_passed_gating_pipeline_is_asked(tmp_path_factory, sources):
    """The default N is the PR's newest SUCCESS gating pipeline; it must then be whole too."""
    with Ledger.open(tmp_path_factory.mktemp("ledger") / "ledger.sqlite") as book:
        numbers = [finished(book, *source, pr=pr) for source, pr in sources]
        candidates = [
            (number, source)
            for number, (source, pr) in zip(numbers, sources, strict=True)
            if pr == 3 and source[0] == "SUCCESS" and source[1]
        ]
        validation = record_validation(book, "head", None, pr=3)
        if not candidates:
            assert not validation.ok and validation.source is None
            assert validation.reason == "no successful gating pipeline to reuse"
            return
        newest, source = candidates[-1]
        assert validation.source == newest
        assert validation.ok == may_validate(*source), validation.reason
        if validation.ok:  # a validation is never picked as the next default
            assert record_validation(book, "next", None, pr=3).source == newest


def test_an_unknown_pipeline_validates_nothing(tmp_path) -> None:
    with Ledger.open(tmp_path / "ledger.sqlite") as book:
        finished(book, "SUCCESS", True, [])
        validation = record_validation(book, "head", 9, pr=3)
        assert (validation.ok, validation.pipeline, validation.source) == (False, None, 9)
        assert validation.reason == book.unknown_pipeline(9)
        assert book.latest_number() == 1
