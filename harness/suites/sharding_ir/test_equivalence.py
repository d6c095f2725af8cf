"""Sharded vs unsharded, per (model id, dist config): each test reads one check from the case's
single run (``case.run_case``). Checks must pass wherever they ran (every rank; matches-hf in the
parent process); each negative control's check must fail on every rank."""

from __future__ import annotations

import pytest

from stagebot.harness.suites.sharding_ir.build import build_ir_model
from stagebot.harness.suites.sharding_ir.case import MATCHES_HF
from stagebot.harness.suites.sharding_ir.dist_config import DistConfig
from stagebot.harness.suites.sharding_ir.registry import DEFAULT, REGISTRY
from stagebot.harness.suites.sharding_ir.worker import (
    AVG_CONTROLS,
    CONTROLS,
    FOLLOWER_CONTROLS,
    FOLLOWER_ROWS,
    MOE_CONTROLS,
)

CHECKS = (
    MATCHES_HF,
    "hints-lowered",
    "local-shapes",
    "collective-counts",
    "load-full-checkpoint",
    "numeric",
    "load-sharded-checkpoint",
)

pytestmark = pytest.mark.slow


def _assert_everywhere(report: dict[str, list], key: str, expect_ok: bool) -> None:
    results = report[key]
    where = (lambda i: f"rank {i}") if len(results) > 1 else (lambda i: "single process")
    wrong = [f"{where(i)}: {r.detail}" for i, r in enumerate(results) if r.ok != expect_ok]
    verdict = "pass" if expect_ok else "fail (negative control)"
    assert not wrong, f"{key} should {verdict} wherever it ran:\n" + "\n".join(wrong)


@pytest.mark.parametrize("check", CHECKS)
def test_check_passes(equivalence_report, check):
    _assert_everywhere(equivalence_report, f"{DEFAULT}/{check}", expect_ok=True)


@pytest.mark.parametrize("control", CONTROLS)
def test_negative_control_is_caught(equivalence_report, control):
    _assert_everywhere(equivalence_report, f"{DEFAULT}/{control}", expect_ok=False)


@pytest.mark.parametrize("control", MOE_CONTROLS)
def test_moe_negative_control_is_caught(equivalence_report, sharding_ir_case, control):
    """Where experts are split over EP ranks, the routing mask is load-bearing: without it the
    lowered MoE (ids clamped, as kernels gather) adds other ranks' tokens to the wrong experts."""
    model_id, config = sharding_ir_case
    key = f"{DEFAULT}/{control}"
    if not REGISTRY[model_id].splits_experts(DistConfig.named(config)):
        assert key not in equivalence_report, f"{key} ran where experts are not split over EP"
        pytest.skip("no MoE experts split over EP ranks in this model / dist config")
    assert key in equivalence_report, f"{key} missing: no routing mask found to remove"
    _assert_everywhere(equivalence_report, key, expect_ok=False)


@pytest.mark.parametrize("check", [FOLLOWER_ROWS, *FOLLOWER_CONTROLS])
def test_followers(equivalence_report, check):
    """Where a weight follows another's row split (a q/k norm's weight its projection's, sinks q's
    heads): the rows check passes; a follower holding other rows fails it and the numeric."""
    if f"{DEFAULT}/{FOLLOWER_ROWS}" not in equivalence_report:
        pytest.skip("no weight of this family follows another's rows")
    _assert_everywhere(equivalence_report, f"{DEFAULT}/{check}", expect_ok=check == FOLLOWER_ROWS)


@pytest.mark.parametrize("control", AVG_CONTROLS)
def test_averaged_statistic(equivalence_report, sharding_ir_case, control):
    """Where a statistic is averaged over TP ranks (a q/k norm over a split projection, as the
    IR's closed form says): a summing all-reduce in its place fails the collective count and the
    numeric check."""
    model_id, config = sharding_ir_case
    model = build_ir_model(REGISTRY[model_id])
    key = f"{DEFAULT}/{control}"
    if not any(op == "avg" for _, op in model.expected_collectives(DistConfig.named(config))):
        assert key not in equivalence_report, f"{key} ran where no statistic is averaged"
        pytest.skip("no statistic of this family is averaged over ranks")
    assert key in equivalence_report, f"{key} missing: no averaging collective was sabotaged"
    _assert_everywhere(equivalence_report, key, expect_ok=False)


def test_variants_pass(equivalence_report):
    keys = [k for k in equivalence_report if not k.startswith(f"{DEFAULT}/")]
    if not keys:
        pytest.skip("no variant of this family applies to this dist config")
    for key in keys:
        _assert_everywhere(equivalence_report, key, expect_ok=True)
