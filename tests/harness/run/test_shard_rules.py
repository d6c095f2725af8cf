"""One shard's state rules at their boundaries: a real pytest per shard, no bot process."""

from __future__ import annotations

import pytest
from fixtures.botrun import ROOT

from stagebot.harness.results import SESSION_ID
from stagebot.harness.run.shard import ShardContext, run_shard
from stagebot.stages.plan import MatrixEntry

pytestmark = pytest.mark.slow


def entry(suite: str, **policy) -> MatrixEntry:
    return MatrixEntry(
        pipeline=1,
        commit=None,
        pr=None,
        stage="CPU-PyTorch-1",
        shard=1,
        shards=1,
        kind="test",
        gpu_type="CPU",
        gpu_count=0,
        runner_labels=[],
        timeout_minutes=5,
        suites=[{"path": f"tests/fixtures/suites/{suite}"}],
        command=None,
        tests=[],
        reused_tests=[],
        reuse_from=None,
        waives=[],
        catalog_digest="d",
        **policy,
    )


def attempts(result) -> dict[str, int]:
    return {t.test_id.split("::")[1]: t.attempts for t in result.tests if t.outcome == "failed"}


@pytest.mark.parametrize(
    ("rerun_max_failures", "expected"),
    [
        pytest.param(2, 2, id="as many failures as the limit: re-run"),
        pytest.param(1, 1, id="one failure over the limit: no re-run"),
    ],
)
def test_the_rerun_limit_counts_failures_inclusively(tmp_path, rerun_max_failures, expected):
    """check_fail.py has exactly two failing tests; the limit says "at most N failed"."""
    shard = entry("check_fail.py", max_reruns=1, rerun_max_failures=rerun_max_failures)
    result = run_shard(shard, ShardContext(out_dir=tmp_path, root=ROOT))
    assert result.state == "FAILURE"
    assert attempts(result) == {"test_wrong_sum": expected, "test_numeric_mismatch": expected}


def test_exit_1_without_a_failed_test_fails_the_shard(tmp_path) -> None:
    """pytest's exit status is the suite's verdict: exit 1 with every test passed is a failing
    session item, never a SUCCESS."""
    result = run_shard(entry("check_silent_exit.py"), ShardContext(out_dir=tmp_path, root=ROOT))
    assert [(t.test_id, t.outcome) for t in result.tests][-1] == (SESSION_ID, "failed")
    assert result.state == "FAILURE"


def test_exit_1_with_a_flaky_test_is_a_success(tmp_path) -> None:
    """The first attempt exits 1 because a test failed; its re-run passed: FLAKY, not ERROR."""
    result = run_shard(entry("check_flaky.py"), ShardContext(out_dir=tmp_path, root=ROOT))
    assert "flaky" in {t.outcome for t in result.tests}
    assert (result.state, result.evidence) == ("SUCCESS", None)
