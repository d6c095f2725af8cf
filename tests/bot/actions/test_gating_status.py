"""Whose gating status wins (bot/actions/gating_status.py), through a small in-memory fake of the
two GitHub calls it makes: statuses are append-only, newest first, and a writer may land between
our read and our write."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from stagebot.bot.actions.gating_status import set_gating_status
from stagebot.bot.github import Status
from stagebot.harness.report import StatusDecision, status_text

SHA = "c0ffee" + "0" * 34
CONTEXT = "stagebot"


class FakeStatuses:
    """Records statuses; ``between`` runs once, right after the first read (another writer)."""

    def __init__(self, *descriptions: str, between: Callable[[FakeStatuses], None] | None = None):
        self.posted: list[Status] = [Status("pending", d, CONTEXT) for d in descriptions]
        self.between = between

    def statuses(self, sha: str, context: str) -> list[Status]:
        newest_first = list(reversed(self.posted))
        if self.between is not None:
            between, self.between = self.between, None
            between(self)
        return newest_first

    def set_status(self, sha, state, context, description, target_url) -> None:
        self.posted.append(Status(state, description, context, target_url))

    @property
    def newest(self) -> str:
        return self.posted[-1].description


PASSED = StatusDecision("success", status_text.pipeline_status(12, "passed on c0ffee0"))


def publish(api: FakeStatuses, status: StatusDecision = PASSED) -> str:
    return set_gating_status(api, CONTEXT, SHA, 12, status, "https://run")


def test_the_pipelines_own_pending_becomes_its_result() -> None:
    api = FakeStatuses(status_text.running(12, "c0ffee0"))
    assert "set to success" in publish(api)
    assert api.newest == PASSED.description


@pytest.mark.parametrize(
    "newest",
    [
        pytest.param(status_text.running(13, "c0ffee0"), id="a newer pipeline's"),
        pytest.param(status_text.skipped("maintainer", "docs only"), id="a person's skip"),
        pytest.param(status_text.validated(12, "maintainer"), id="a person's reuse of #12"),
    ],
)
def test_a_status_this_pipeline_does_not_own_is_left_alone(newest) -> None:
    api = FakeStatuses(status_text.running(12, "c0ffee0"), newest)
    assert "belongs to another pipeline" in publish(api)
    assert api.newest == newest


@pytest.mark.parametrize(
    ("landed", "on_top"),
    [
        pytest.param(status_text.running(13, "c0ffee0"), True, id="a newer pipeline's"),
        pytest.param(status_text.skipped("maintainer", "ok"), True, id="a person's skip"),
        pytest.param(status_text.pipeline_status(11, "failed: x"), False, id="an older one's"),
    ],
)
def test_a_writer_landing_between_read_and_write(landed, on_top) -> None:
    """Posted between our read and our write: a newer pipeline's or a person's status is
    posted again on top of ours; an older pipeline's is not."""
    api = FakeStatuses(
        status_text.running(12, "c0ffee0"),
        between=lambda fake: fake.set_status(SHA, "pending", CONTEXT, landed, None),
    )
    line = publish(api)
    assert api.newest == (landed if on_top else PASSED.description)
    assert ("which landed in between" in line) is on_top


def test_partly_tested_and_unpinned_pipelines_write_nothing() -> None:
    api = FakeStatuses(status_text.running(12, "c0ffee0"))
    assert "Partly Tested" in publish(api, StatusDecision(None, "Partly Tested"))
    assert "no pinned commit" in set_gating_status(api, CONTEXT, None, 12, PASSED, None)
    assert len(api.posted) == 1
