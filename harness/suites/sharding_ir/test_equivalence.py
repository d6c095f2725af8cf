"""Sharded vs unsharded, per (model id, dist config): each test reads one check from the case's
single spawn. Checks must pass on every rank; each negative control's check must fail on every
rank."""

from __future__ import annotations

import pytest

from stagebot.harness.suites.sharding_ir.dist_config import NAMED_CONFIGS
from stagebot.harness.suites.sharding_ir.registry import REGISTRY
from stagebot.harness.suites.sharding_ir.worker import CONTROLS, DEFAULT, MOE_CONTROLS

CHECKS = (
    "hints-lowered",
    "local-shapes",
    "collective-counts",
    "load-full-checkpoint",
    "numeric",
    "load-sharded-checkpoint",
)

pytestmark = pytest.mark.slow


def _assert_on_all_ranks(report: dict[str, list], key: str, expect_ok: bool) -> None:
    results = report[key]
    wrong = [f"rank {rank}: {r.detail}" for rank, r in enumerate(results) if r.ok != expect_ok]
    verdict = "pass" if expect_ok else "fail (negative control)"
    assert not wrong, f"{key} should {verdict} on every rank:\n" + "\n".join(wrong)


@pytest.mark.parametrize("check", CHECKS)
def test_check_passes(equivalence_report, check):
    _assert_on_all_ranks(equivalence_report, f"{DEFAULT}/{check}", expect_ok=True)


@pytest.mark.parametrize("control", CONTROLS)
def test_negative_control_is_caught(equivalence_report, control):
    _assert_on_all_ranks(equivalence_report, f"{DEFAULT}/{control}", expect_ok=False)


@pytest.mark.parametrize("control", MOE_CONTROLS)
def test_moe_negative_control_is_caught(equivalence_report, sharding_ir_case, control):
    """Where experts are split over EP ranks, the routing mask is load-bearing: without it the
    lowered MoE (ids clamped, as kernels gather) adds other ranks' tokens to the wrong experts."""
    model_id, config = sharding_ir_case
    ep_split = "num_experts" in REGISTRY[model_id].tiny and NAMED_CONFIGS[config][2] >= 2
    key = f"{DEFAULT}/{control}"
    if not ep_split:
        assert key not in equivalence_report, f"{key} ran where experts are not split over EP"
        pytest.skip("no MoE experts split over EP ranks in this model / dist config")
    assert key in equivalence_report, f"{key} missing: no routing mask found to remove"
    _assert_on_all_ranks(equivalence_report, key, expect_ok=False)


def test_variants_pass(equivalence_report):
    keys = [k for k in equivalence_report if not k.startswith(f"{DEFAULT}/")]
    if not keys:
        pytest.skip("no registered variant applies to this model / dist config")
    for key in keys:
        _assert_on_all_ranks(equivalence_report, key, expect_ok=True)
