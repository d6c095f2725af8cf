"""The first signal on GitHub, as the three workflows run it on the fake GitHub (real PyGithub):
what the reply says of GPU time. (Fail-fast and partial replies across stage runs are not built
yet: docs/github.md says so.)"""

# ruff: noqa: F401, F811 - pytest fixtures imported from the helper that defines them
from __future__ import annotations

import pytest
from helpers.fake_pr import replies
from helpers.workflow_jobs import gh, jobs

pytestmark = pytest.mark.slow


def test_the_reply_counts_gpu_time(gh, jobs) -> None:
    jobs.whole("/bot run", 101)
    (reply,) = replies(gh)
    assert "completed with state SUCCESS" in reply["body"]
    assert "GPU time: none (no GPU stage in this pipeline)." in reply["body"]
