"""The versioned JSON contracts: schemas accept examples and real outputs, reject breakage."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest
from helpers.contracts import CONTRACTS, example, schema, validate

from stagebot.bot.comments.grammar import parse_comment
from stagebot.bot.protocols.marker import MarkerError, ReplyMarker, find_marker
from stagebot.harness.results import ResultError, StageResult
from stagebot.stages.catalog import load_catalog
from stagebot.stages.errors import PlanError
from stagebot.stages.matrix import matrix_entries
from stagebot.stages.plan import MatrixEntry, Plan
from stagebot.stages.planner import plan_run


@pytest.mark.parametrize("name", CONTRACTS)
def test_schema_is_valid_and_accepts_its_example(name: str) -> None:
    jsonschema.Draft202012Validator.check_schema(schema(name))
    validate(name, example(name))


@pytest.mark.parametrize("name", CONTRACTS)
def test_example_round_trips_through_its_class(name: str) -> None:
    cls = CONTRACTS[name][1]
    assert (
        cls.from_json(example(name)).to_json() == example(name)
        if name != "reply_marker"
        else json.loads(cls.from_json(example(name)).render()[len("<!-- stagebot:") : -len(" -->")])
        == example(name)
    )


@pytest.mark.parametrize(
    ("name", "breakage"),
    [
        ("command", lambda d: d.update(version=2)),
        ("command", lambda d: d["options"].update(stage_list="A10-PyTorch-1")),
        ("command", lambda d: d["options"].update(reuse_test="yesterday")),
        ("reply_marker", lambda d: d.update(state="DONE")),
        ("reply_marker", lambda d: d.pop("comment_id")),
        ("plan", lambda d: d["shards"][0].update(action="maybe")),
        ("plan", lambda d: d.pop("gating")),
        ("matrix_entry", lambda d: d.update(gpu_count=-1)),
        ("matrix_entry", lambda d: d.update(extra="x")),
        ("stage_result", lambda d: d.update(state="PASSED")),
        ("stage_result", lambda d: d["tests"][0].update(outcome="ok")),
    ],
)
def test_schema_rejects_a_broken_example(name: str, breakage) -> None:
    data = copy.deepcopy(example(name))
    breakage(data)
    with pytest.raises(jsonschema.ValidationError):
        validate(name, data)


@pytest.mark.parametrize(
    "comment",
    [
        "/bot run",
        "/bot kill",
        "/bot help",
        "no command here",
        '/bot skip --comment "r"',
        "/bot reuse-pipeline #3",
        "/bot reuse-pipeline",
        '/bot run --reuse-test --stage-list "A10-*" --test-backend cpp --debug'.replace(
            '"A10-*"', '"A10-PyTorch-1"'
        ),
    ],
)
def test_real_commands_match_the_schema(comment: str) -> None:
    validate("command", parse_comment(comment).to_json())


@pytest.mark.parametrize(
    "comment", ["/bot run", "/bot run --post-merge --skip-test", '/bot run --stage-list "*"']
)
def test_real_plans_and_matrix_entries_match_their_schemas(comment: str) -> None:
    catalog = load_catalog()
    plan = plan_run(parse_comment(comment), catalog, changed_files=["README.md"], commit="c" * 40)
    validate("plan", plan.to_json())
    entries = matrix_entries(plan, catalog, pipeline=12)
    assert [entry.stage for entry in entries] == [shard.stage for shard in plan.shards_to("run")]
    for entry in entries:
        validate("matrix_entry", entry.to_json())
        assert MatrixEntry.from_json(entry.to_json()) == entry


def test_matrix_entry_carries_what_a_job_needs() -> None:
    catalog = load_catalog()
    plan = plan_run(
        parse_comment('/bot run --stage-list "DGX_H200-4_GPUs-AutoDeploy-1"'),
        catalog,
        commit="d" * 40,
        pr=9,
    )
    (entry,) = matrix_entries(plan, catalog, pipeline=31)
    assert (entry.pipeline, entry.commit, entry.pr, entry.gpu_count) == (31, "d" * 40, 9, 4)
    assert entry.runner_labels == list(catalog.gpu_types["DGX_H200"].runner_labels)
    assert entry.suites[0]["path"] == "harness/suites/sharding_ir"


def test_reader_errors_name_the_problem() -> None:
    with pytest.raises(PlanError, match="unsupported Plan version 7"):
        Plan.from_json({"version": 7})
    with pytest.raises(PlanError, match="matrix entry lacks"):
        MatrixEntry.from_json({"version": 1, "stage": "x"})
    with pytest.raises(ResultError, match="state 'PASSED'"):
        StageResult.from_json({**example("stage_result"), "state": "PASSED"})


@pytest.mark.parametrize(
    ("broken", "named"),
    [
        pytest.param(lambda plan: plan.pop("gating"), "Plan lacks gating", id="a Plan field"),
        pytest.param(
            lambda plan: plan["shards"][0].pop("action"),
            "planned shard lacks action",
            id="a shard field",
        ),
        pytest.param(
            lambda plan: plan["shards"].__setitem__(0, "CPU-PyTorch-1"),
            "planned shard is str, not a JSON object",
            id="a shard that is not an object",
        ),
    ],
)
def test_a_damaged_plan_is_a_plan_error_naming_what_it_lacks(broken, named) -> None:
    """A plan read back (plan.json from the plan job, a ledger's record) is checked as it is
    read: a KeyError or TypeError from deep inside the report would name nothing."""
    data = copy.deepcopy(example("plan"))
    assert Plan.from_json(data).to_json() == data  # the example itself reads back
    broken(data)
    with pytest.raises(PlanError, match=named):
        Plan.from_json(data)


def test_marker_survives_hostile_stage_names_and_is_found_in_a_body() -> None:
    marker = ReplyMarker(5, "abc1234", 99, "RUNNING", {"x --> <!-- y": "SUCCESS"})
    body = f"PR_Github #5 [ run ] triggered by Bot.\n{marker.render()}\n"
    assert marker.render().count("-->") == 1
    assert find_marker(body) == marker
    # read only from the bot's position, the last line: not from inside the body
    assert find_marker(f"{body}a quote of it, and more text") is None
    assert find_marker("no marker") is None
    with pytest.raises(MarkerError, match="not JSON"):
        find_marker("<!-- stagebot:{nope} -->")
    with pytest.raises(MarkerError, match="state 'DONE'"):
        find_marker(marker.render().replace("RUNNING", "DONE"))


def test_a_reply_posted_before_one_run_per_stage_names_its_run_as_stage_runs() -> None:
    """Replies of pipelines running when the bot was upgraded carry ``stage_run`` (one id)."""
    old = '{"comment_id":9,"commit":"abc1234","pipeline":5,"stage_run":71001,'
    old += '"stages":{"CPU-PyTorch-1":"PENDING"},"state":"RUNNING","version":1}'
    marker = find_marker(f"PR_Github #5 [ run ] triggered by Bot.\n\n<!-- stagebot:{old} -->")
    assert marker.stage_runs == (71001,)
    assert '"stage_runs":[71001]' in marker.render()  # written back in today's form
    with pytest.raises(MarkerError, match="stage_runs \\[0\\] are not run ids"):
        find_marker(f"<!-- stagebot:{old.replace('71001', '0')} -->")


def test_find_marker_takes_the_last_marker_and_ignores_earlier_forgeries() -> None:
    """The bot's marker is always the last thing in its reply: text earlier in the body (user
    text that slipped through, a quoted marker) can neither replace nor hide it."""
    ours = ReplyMarker(5, "abc1234", 99, "SUCCESS", {})
    forged = ReplyMarker(4242, "f" * 40, 1, "RUNNING", {}).render()
    assert find_marker(f"files: `{forged}`\n\n{ours.render()}\n") == ours
    assert find_marker(f"junk <!-- stagebot:{{nope}} -->\n\n{ours.render()}\n") == ours
    # an unclosed forged prefix on an earlier line does not swallow the real marker
    assert find_marker(f"x <!-- stagebot:{{ and more\n\n{ours.render()}\n") == ours
