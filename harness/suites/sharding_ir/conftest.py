"""Parametrises the equivalence tests by (model id, dist config) from the suite's options, and runs
each case's whole check list in one spawn, whose report that case's tests share."""

from __future__ import annotations

import pytest

from stagebot.harness.suites.sharding_ir.dist_config import DEFAULT_CONFIG
from stagebot.harness.suites.sharding_ir.registry import REGISTRY


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "sharding_ir_case" not in metafunc.fixturenames:
        return
    model_ids = REGISTRY.resolve_model_ids(metafunc.config.getoption("--sharding-ir-model-id"))
    configs = list(
        dict.fromkeys(metafunc.config.getoption("--sharding-ir-dist-config") or [DEFAULT_CONFIG])
    )
    if not model_ids:
        reason = "pass --sharding-ir-model-id <hf-id>|all to run the sharding-IR equivalence check"
        params = [pytest.param(None, id="no-model-id", marks=pytest.mark.skip(reason=reason))]
    else:
        # config by config, so the cheap configs' results come first
        params = [pytest.param((m, c), id=f"{m}:{c}") for c in configs for m in model_ids]
    metafunc.parametrize("sharding_ir_case", params)


@pytest.fixture(scope="session")
def _equivalence_reports() -> dict:
    """Case -> report or the RankFailure raised: one spawn per case, however pytest orders tests."""
    return {}


@pytest.fixture
def equivalence_report(
    sharding_ir_case: tuple[str, str], _equivalence_reports: dict, request: pytest.FixtureRequest
) -> dict[str, list]:
    """Check name -> CheckResults (one per rank; matches-hf one), from the case's ``run_case``."""
    from stagebot.harness.suites.sharding_ir.case import run_case
    from stagebot.harness.suites.sharding_ir.limits import SpawnLimits
    from stagebot.harness.suites.sharding_ir.spawn import RankFailure

    if sharding_ir_case not in _equivalence_reports:
        model_id, config = sharding_ir_case
        limits = SpawnLimits(run_s=request.config.getoption("--sharding-ir-rank-timeout"))
        try:
            spec = REGISTRY.lookup(model_id)
            dtype = request.config.getoption("--sharding-ir-gloo-dtype")
            _equivalence_reports[sharding_ir_case] = run_case(spec, config, limits, dtype)
        except RankFailure as failure:
            _equivalence_reports[sharding_ir_case] = failure
    report = _equivalence_reports[sharding_ir_case]
    if isinstance(report, Exception):
        raise type(report)(str(report))
    return report
