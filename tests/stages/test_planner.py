"""The planner on a small catalog: selection order, reasons, path rules, gating, approval, reuse."""

from __future__ import annotations

import pytest

from stagebot.bot.comments.grammar import parse_comment
from stagebot.stages.catalog import load_catalog
from stagebot.stages.errors import PlanError
from stagebot.stages.history import PriorShard
from stagebot.stages.plan import Plan
from stagebot.stages.planner import plan_run

CATALOG = """
gpu_types:
  CPU: {device_names: [], runner_labels: [ubuntu-latest]}
  A10: {arch: sm_86, device_names: ["NVIDIA A10"], runner_labels: [gpu-a10]}
  DGX_H200: {arch: sm_90a, device_names: ["NVIDIA H200"], runner_labels: [gpu-h200]}
families:
  - {name: CPU-PyTorch, kind: test, timeout_minutes: 5, suites: [{path: suites/cpu}],
     skip_if_only_changed: ["**/*.md"]}
  - {name: A10-PyTorch, kind: test, shards: 2, timeout_minutes: 5, suites: [{path: suites/gpu}],
     skip_if_only_changed: ["**/*.md"]}
  - {name: A10-CPP, kind: test, timeout_minutes: 5, suites: [{path: suites/cpp}],
     run_if_changed: ["cpp/**"]}
  - {name: DGX_H200-4_GPUs-AutoDeploy, kind: test, timeout_minutes: 5,
     suites: [{path: suites/ad}], run_if_changed: ["ad/**"]}
  - {name: DGX_H200-4_GPUs-PyTorch, kind: test, timeout_minutes: 5, suites: [{path: suites/gpu}]}
  - {name: DGX_H200-PyTorch-Post-Merge, kind: test, timeout_minutes: 5,
     suites: [{path: suites/gpu}]}
  - {name: A10-Build_Docs, kind: build, timeout_minutes: 5, command: make docs,
     run_if_changed: ["**/*.md"]}
"""
SINGLE_PRE_MERGE = [
    "CPU-PyTorch-1",
    "A10-PyTorch-1",
    "A10-PyTorch-2",
    "A10-CPP-1",
    "A10-Build_Docs",
]


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    path = tmp_path_factory.mktemp("catalog") / "catalog.yaml"
    path.write_text(CATALOG)
    return load_catalog(path)


def plan(catalog, comment: str, **context) -> Plan:
    return plan_run(parse_comment(comment), catalog, **context)


def acting(result: Plan, action: str = "run") -> list[str]:
    return [shard.stage for shard in result.shards_to(action)]


SELECTIONS = [
    pytest.param(
        "/bot run",
        None,
        SINGLE_PRE_MERGE[:4] + ["DGX_H200-4_GPUs-AutoDeploy-1", "A10-Build_Docs"],
        id="default, changed files unknown",
    ),
    pytest.param("/bot run", ["src/x.py"], SINGLE_PRE_MERGE[:3], id="default, a source change"),
    pytest.param(
        "/bot run",
        ["ad/sharding.py"],
        SINGLE_PRE_MERGE[:3] + ["DGX_H200-4_GPUs-AutoDeploy-1"],
        id="multi-GPU stage joins through run_if_changed",
    ),
    pytest.param(
        "/bot run",
        ["README.md", "docs/a.md"],
        ["A10-Build_Docs"],
        id="docs-only change runs only the docs build",
    ),
    pytest.param(
        "/bot run",
        ["README.md", "src/x.py"],
        SINGLE_PRE_MERGE[:3] + ["A10-Build_Docs"],
        id="docs and code changed: skip_if_only_changed skips nothing",
    ),
    pytest.param(
        "/bot run",
        ["src/x.py", "cpp/y.cc", "docs/a.md"],
        SINGLE_PRE_MERGE,
        id="one matching file is enough for run_if_changed",
    ),
    pytest.param(
        "/bot run --post-merge",
        ["src/x.py"],
        SINGLE_PRE_MERGE[:3] + ["DGX_H200-4_GPUs-PyTorch-1", "DGX_H200-PyTorch-Post-Merge-1"],
        id="--post-merge",
    ),
    pytest.param(
        '/bot run --stage-list "A10-CPP-1, A10-Build_Docs"',
        ["src/x.py"],
        ["A10-CPP-1", "A10-Build_Docs"],
        id="--stage-list exempt from path rules",
    ),
    pytest.param(
        '/bot run --stage-list "A10-PyTorch-*"',
        ["README.md"],
        ["A10-PyTorch-1", "A10-PyTorch-2"],
        id="--stage-list wildcard",
    ),
    pytest.param(
        '/bot run --extra-stage "DGX_H200-4_GPUs-PyTorch-1"',
        ["src/x.py"],
        SINGLE_PRE_MERGE[:3] + ["DGX_H200-4_GPUs-PyTorch-1"],
        id="--extra-stage",
    ),
    pytest.param(
        "/bot run --add-multi-gpu-test",
        ["src/x.py"],
        SINGLE_PRE_MERGE[:3] + ["DGX_H200-4_GPUs-AutoDeploy-1", "DGX_H200-4_GPUs-PyTorch-1"],
        id="--add-multi-gpu-test forces multi-GPU stages past path rules",
    ),
    pytest.param(
        "/bot run --add-multi-gpu-test",
        None,
        SINGLE_PRE_MERGE[:4]
        + ["DGX_H200-4_GPUs-AutoDeploy-1", "DGX_H200-4_GPUs-PyTorch-1", "A10-Build_Docs"],
        id="--add-multi-gpu-test, changed files unknown",
    ),
    pytest.param(
        "/bot run --only-multi-gpu-test",
        ["src/x.py"],
        ["DGX_H200-4_GPUs-AutoDeploy-1", "DGX_H200-4_GPUs-PyTorch-1"],
        id="--only-multi-gpu-test selects every multi-GPU pre-merge stage",
    ),
    pytest.param(
        "/bot run --only-multi-gpu-test --post-merge",
        ["README.md"],
        ["DGX_H200-4_GPUs-AutoDeploy-1", "DGX_H200-4_GPUs-PyTorch-1"],
        id="--only-multi-gpu-test on a docs-only change still runs them",
    ),
    pytest.param(
        "/bot run --disable-multi-gpu-test",
        None,
        SINGLE_PRE_MERGE[:4] + ["A10-Build_Docs"],
        id="--disable-multi-gpu-test",
    ),
    pytest.param('/bot run --gpu-type "CPU"', None, ["CPU-PyTorch-1"], id="--gpu-type"),
    pytest.param(
        "/bot run --test-backend cpp",
        None,
        ["A10-CPP-1", "A10-Build_Docs"],
        id="--test-backend keeps build stages",
    ),
    pytest.param("/bot run --skip-test", None, ["A10-Build_Docs"], id="--skip-test"),
]


@pytest.mark.parametrize(("comment", "changed", "runs"), SELECTIONS)
def test_selection(catalog, comment: str, changed: list[str] | None, runs: list[str]) -> None:
    assert acting(plan(catalog, comment, changed_files=changed)) == runs


def test_path_rule_skips_are_listed_with_reasons(catalog) -> None:
    result = plan(catalog, "/bot run", changed_files=["src/x.py"])
    skips = {shard.stage: shard.reason for shard in result.shards_to("skip")}
    assert skips == {
        "A10-CPP-1": "run_if_changed: no changed file matches cpp/**",
        "A10-Build_Docs": "run_if_changed: no changed file matches **/*.md",
    }
    step = next(step for step in result.steps if step.step == "path-rules")
    assert step.removed == ["A10-CPP-1", "A10-Build_Docs"]


def test_steps_are_recorded_in_order(catalog) -> None:
    result = plan(
        catalog,
        '/bot run --extra-stage "DGX_H200-4_GPUs-PyTorch-1" --gpu-type A10,DGX_H200',
        changed_files=["src/x.py"],
    )
    assert [step.step for step in result.steps] == [
        "base",
        "extra-stage",
        "gpu-type",
        "path-rules",
        "reuse",
    ]
    assert result.steps[2].removed == ["CPU-PyTorch-1"]


def test_extra_stage_is_marked_explicit(catalog) -> None:
    result = plan(catalog, '/bot run --extra-stage "DGX_H200-4_GPUs-PyTorch-1"')
    explicit = {shard.stage: shard.selected_by for shard in result.shards if shard.explicit}
    assert explicit == {"DGX_H200-4_GPUs-PyTorch-1": "--extra-stage"}


def test_unknown_changed_files_are_noted(catalog) -> None:
    assert any("changed files unknown" in note for note in plan(catalog, "/bot run").notes)
    assert plan(catalog, "/bot run", changed_files=[]).notes == []


@pytest.mark.parametrize(
    ("comment", "gating", "narrowing"),
    [
        ("/bot run", True, None),
        ("/bot run --disable-fail-fast --extra-stage A10-CPP-1", True, None),
        ("/bot run --post-merge", True, None),
        ("/bot run --add-multi-gpu-test", True, None),
        ("/bot run --stage-list A10-CPP-1", False, "--stage-list"),
        ("/bot run --gpu-type A10", False, "--gpu-type"),
        ("/bot run --test-backend cpp", False, "--test-backend"),
        ("/bot run --skip-test", False, "--skip-test"),
        ("/bot run --only-multi-gpu-test", False, "--only-multi-gpu-test"),
        ("/bot run --disable-multi-gpu-test", False, "--disable-multi-gpu-test"),
        ("/bot run --debug --stage-list A10-CPP-1", False, "--stage-list, --debug"),
    ],
)
def test_gating(catalog, comment: str, gating: bool, narrowing: str | None) -> None:
    result = plan(catalog, comment)
    assert result.gating is gating
    if narrowing:
        assert result.partly_tested_reason.startswith(narrowing)
    else:
        assert result.partly_tested_reason is None


@pytest.mark.parametrize(
    ("comment", "needs"),
    [
        ("/bot run", False),
        ("/bot run --post-merge", True),
        ("/bot run --add-multi-gpu-test", True),
        ("/bot run --only-multi-gpu-test", True),
        ('/bot run --stage-list "DGX_H200-PyTorch-Post-Merge-1"', False),
        ('/bot run --stage-list "*"', True),
        ('/bot run --stage-list "*Post-Merge*"', True),
        ('/bot run --stage-list "A10-*"', False),
        ('/bot run --extra-stage "DGX_H200-*"', True),
    ],
)
def test_needs_approval(catalog, comment: str, needs: bool) -> None:
    result = plan(catalog, comment)
    assert result.needs_approval is needs
    assert bool(result.approval_reasons) is needs


@pytest.mark.parametrize(
    ("comment", "message"),
    [
        ('/bot run --stage-list "A10-PyTorch-3"', "unknown stage 'A10-PyTorch-3'; did you mean"),
        (
            '/bot run --extra-stage "A10-Pytorch-1"',
            "--extra-stage: unknown stage 'A10-Pytorch-1'; did you mean 'A10-PyTorch-1'",
        ),
        ('/bot run --stage-list "H100-*"', "the pattern 'H100-*' matches no stage"),
        ('/bot run --gpu-type "H200"', "unknown GPU type 'H200'; did you mean 'DGX_H200'"),
        ('/bot run --gpu-type "Z9"', "(valid: CPU, A10, DGX_H200)"),
    ],
)
def test_plan_errors(catalog, comment: str, message: str) -> None:
    with pytest.raises(PlanError) as raised:
        plan(catalog, comment)
    assert message in str(raised.value)


def test_only_run_is_planned(catalog) -> None:
    with pytest.raises(PlanError, match="only `/bot run` is planned"):
        plan(catalog, "/bot kill")


class RecordedHistory:
    """A History over fixed records: (stage, commit, pipeline) -> PriorShard."""

    def __init__(self, records: list[tuple[str, str, PriorShard]]):
        self.records = records

    def prior_shard(self, stage: str, commit: str, pipeline: int | None) -> PriorShard | None:
        found = [
            prior
            for s, c, prior in self.records
            if s == stage and c == commit and (pipeline is None or prior.pipeline == pipeline)
        ]
        return max(found, key=lambda prior: prior.pipeline, default=None)


SHA = "a" * 40


def test_reuse(catalog) -> None:
    digest = catalog.digest
    history = RecordedHistory(
        [
            ("CPU-PyTorch-1", SHA, PriorShard(3, "SUCCESS", ("t::a",), digest)),
            ("A10-PyTorch-1", SHA, PriorShard(4, "FAILURE", ("t::a", "t::b"), digest)),
            ("A10-PyTorch-2", SHA, PriorShard(4, "SUCCESS", (), "an older catalog")),
            ("A10-CPP-1", "b" * 40, PriorShard(4, "SUCCESS", (), digest)),
        ]
    )
    result = plan(
        catalog, "/bot run", changed_files=["src/x.py", "cpp/y.cc"], commit=SHA, history=history
    )
    by_stage = {shard.stage: shard for shard in result.shards}
    assert (by_stage["CPU-PyTorch-1"].action, by_stage["CPU-PyTorch-1"].reuse_from) == ("reuse", 3)
    assert by_stage["CPU-PyTorch-1"].reason == "passed in #3 on aaaaaaa"
    assert by_stage["A10-PyTorch-1"].action == "run"
    assert by_stage["A10-PyTorch-1"].reused_tests == ["t::a", "t::b"]
    assert by_stage["A10-PyTorch-2"].reason == "catalog or waives changed since #4"
    assert by_stage["A10-CPP-1"].reason.startswith("no result for this stage on aaaaaaa")
    assert result.steps[-1].removed == ["CPU-PyTorch-1"]


def test_reuse_from_a_named_pipeline_and_disabled(catalog) -> None:
    history = RecordedHistory(
        [
            ("CPU-PyTorch-1", SHA, PriorShard(3, "SUCCESS", (), catalog.digest)),
            ("CPU-PyTorch-1", SHA, PriorShard(5, "FAILURE", (), catalog.digest)),
        ]
    )
    named = plan(catalog, "/bot run --reuse-test #3 --gpu-type CPU", commit=SHA, history=history)
    assert acting(named, "reuse") == ["CPU-PyTorch-1"]
    latest = plan(catalog, "/bot run --gpu-type CPU", commit=SHA, history=history)
    assert acting(latest, "reuse") == []
    disabled = plan(
        catalog, "/bot run --disable-reuse-test --gpu-type CPU", commit=SHA, history=history
    )
    assert acting(disabled) == ["CPU-PyTorch-1"]
    assert disabled.shards[0].reason == "--disable-reuse-test: everything runs"
    assert acting(plan(catalog, "/bot run --gpu-type CPU", history=history)) == ["CPU-PyTorch-1"]


def test_shipped_catalog_extra_stage_example() -> None:
    """The issue's example: the default plan plus two stages, marked as named explicitly."""
    result = plan_run(
        parse_comment(
            '/bot run --extra-stage "DGX_B200-4_GPUs-AutoDeploy-1, '
            'DGX_H100-4_GPUs-AutoDeploy-1" --disable-fail-fast'
        ),
        load_catalog(),
    )
    default = plan_run(parse_comment("/bot run"), load_catalog())
    assert set(acting(result)) - set(acting(default)) == {
        "DGX_B200-4_GPUs-AutoDeploy-1",
        "DGX_H100-4_GPUs-AutoDeploy-1",
    }
    assert [s.stage for s in result.shards if s.explicit] == [
        "DGX_H100-4_GPUs-AutoDeploy-1",
        "DGX_B200-4_GPUs-AutoDeploy-1",
    ]
    assert result.gating


def test_plan_round_trips_through_json(catalog) -> None:
    result = plan(catalog, "/bot run --post-merge", changed_files=["a"], commit=SHA, pr=7)
    assert Plan.from_json(result.to_json()) == result


def test_flags_that_undo_each_other_are_a_command_error() -> None:
    from stagebot.stages.errors import CommandError

    with pytest.raises(CommandError, match="--add-multi-gpu-test and --disable-multi-gpu-test"):
        parse_comment("/bot run --add-multi-gpu-test --disable-multi-gpu-test")


@pytest.mark.parametrize(
    ("comment", "error"),
    [
        (
            '/bot run --skip-test --stage-list "A10-PyTorch-1, CPU-PyTorch-1"',
            "--skip-test keeps only build and sanity stages, and the stages selected "
            "(A10-PyTorch-1, CPU-PyTorch-1) are all tests: nothing would run",
        ),
        (
            "/bot run --test-backend tensorrt",
            "--test-backend tensorrt: no test stage of the catalog has that backend, so none "
            "would run (the catalog's test backends: autodeploy, cpp, pytorch)",
        ),
    ],
)
def test_contradictory_or_empty_plans_are_errors(catalog, comment: str, error: str) -> None:
    with pytest.raises(PlanError) as raised:
        plan_run(parse_comment(comment), catalog, changed_files=[])
    assert str(raised.value).startswith(error), raised.value


def test_the_flags_alone_still_plan(catalog) -> None:
    """Negative controls: each flag of the refused pairs is a plan on its own, and --skip-test
    with a build stage named keeps it."""
    for comment in (
        "/bot run --add-multi-gpu-test",
        '/bot run --skip-test --stage-list "A10-PyTorch-1, A10-Build_Docs"',
    ):
        assert plan_run(parse_comment(comment), catalog, changed_files=[]).shards_to("run")


def test_a_filter_that_leaves_nothing_says_which_step_emptied_the_plan(catalog) -> None:
    plan = plan_run(
        parse_comment("/bot run --gpu-type CPU --test-backend autodeploy"),
        catalog,
        changed_files=[],
    )
    assert not plan.shards
    assert (
        "no stage is selected: nothing will run; the test-backend step removed the last "
        "(--test-backend keeps test stages of autodeploy (build/sanity stages stay))"
    ) in plan.notes
