"""When a partial report may replace the pipeline's reply (bot/actions/partial_reply.py): report
runs of one pipeline land in any order and GitHub has no conditional edit, so only a reply that
still says RUNNING and shows fewer stages done than the report knows is replaced."""

from __future__ import annotations

import pytest

from stagebot.bot.actions.partial_reply import refusal
from stagebot.bot.protocols.marker import ReplyMarker

SHA = "c0ffee" + "0" * 34


def marker(state: str, done: int, pending: int) -> ReplyMarker:
    stages = {f"S{i}": "SUCCESS" for i in range(done)}
    stages |= {f"P{i}": "PENDING" for i in range(pending)}
    return ReplyMarker(101, SHA, 7101, state, stages, (71001, 71002))


def test_a_report_that_knows_more_stages_done_replaces_a_running_reply() -> None:
    assert refusal(marker("RUNNING", 1, 2), 2) is None
    assert refusal(marker("RUNNING", 0, 3), 1) is None  # the triggered reply: all PENDING


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
