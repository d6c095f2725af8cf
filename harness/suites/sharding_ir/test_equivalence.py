"""Sharded vs unsharded, per (model id, dist config): each test reads one check from the case's
single spawn. Checks must pass on every rank; each negative control's check must fail on every
rank."""

from __future__ import annotations

import pytest

from stagebot.harness.suites.sharding_ir.worker import CONTROLS, DEFAULT

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


def test_variants_pass(equivalence_report):
    keys = [k for k in equivalence_report if not k.startswith(f"{DEFAULT}/")]
    if not keys:
        pytest.skip("no registered variant applies to this model / dist config")
    for key in keys:
        _assert_on_all_ranks(equivalence_report, key, expect_ok=True)
