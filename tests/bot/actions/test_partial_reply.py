"""When a partial report may replace the pipeline's reply (bot/actions/partial_reply.py): report
runs of one pipeline land in any order and GitHub has no conditional edit, so only a reply that
still says RUNNING and shows fewer stages done than the report knows is replaced."""

from __future__ import annotations

import pytest

from stagebot.bot.actions.partial_reply import Progress, refusal
from stagebot.bot.protocols.marker import ReplyMarker

SHA = "c0ffee" + "0" * 34


def marker(state: str, done: int, pending: int) -> ReplyMarker:
    stages = {f"S{i}": "SUCCESS" for i in range(done)}
    stages |= {f"P{i}": "PENDING" for i in range(pending)}
    return ReplyMarker(101, SHA, 7101, state, stages, (71001, 71002))


def test_a_report_that_knows_more_stages_done_replaces_a_running_reply() -> None:
    assert refusal(marker("RUNNING", 1, 2), 2) is None
    assert refusal(marker("RUNNING", 0, 3), 1) is None  # the triggered reply: all PENDING


def test_reused_stages_are_not_stages_a_run_finished() -> None:
    """The triggered reply lists the reused stages as REUSED: the first stage run to end must
    still replace it (it knows 1 run finished, the reply shows none)."""
    reused = ReplyMarker(
        101, SHA, 7101, "RUNNING", {"R1": "REUSED", "R2": "REUSED", "P": "PENDING"}
    )
    assert refusal(reused, 1) is None
    assert "already shows 1" in refusal(marker("RUNNING", 1, 1), 1)  # the control


@pytest.mark.parametrize(
    ("shown", "known", "why"),
    [
        pytest.param(marker("RUNNING", 2, 1), 1, "already shows 2 stage(s) done", id="knows less"),
        pytest.param(marker("RUNNING", 2, 1), 2, "already shows 2 stage(s) done", id="the same"),
        pytest.param(marker("FAILURE", 3, 0), 3, "its reply says FAILURE", id="final report"),
        pytest.param(marker("ABORTED", 0, 3), 1, "its reply says ABORTED", id="killed"),
        pytest.param(None, 1, "there is none", id="no reply"),
    ],
)
def test_a_stale_or_ended_reply_is_never_replaced(shown, known, why) -> None:
    assert why in refusal(shown, known)


def progress(expected: dict, elapsed: dict) -> Progress:
    return Progress([], list(expected), [], None, expected, elapsed)


def test_the_estimate_counts_what_is_left_of_each_running_stages_last_full_run() -> None:
    # B's run started 10 min ago and takes 15: 5 min left; A just started and takes 8
    eta = progress({"A": 480.0, "B": 900.0}, {"A": 0.0, "B": 600.0}).eta
    assert eta.startswith("Expected to end within about 8m00s (A's last full run in the ledger")
    assert "took 8m00s, its run started 0.0s ago)" in eta
    overdue = progress({"A": 60.0}, {"A": 300.0}).eta  # past its estimate: ends any moment
    assert overdue.startswith("Expected to end within about 0.0s (A's")
    unstarted = progress({"A": 60.0}, {}).eta  # GitHub did not say when it started
    assert (
        unstarted
        == "Expected to end within about 1m00s (A's last full run in the ledger took 1m00s)."
    )
    assert "no full run of C" in progress({"A": 60.0, "C": None}, {}).eta
