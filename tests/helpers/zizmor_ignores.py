"""The zizmor findings the workflows ignore on purpose, and why (tests/test_workflows.py runs
zizmor; SECURITY.md lists the same)."""

from __future__ import annotations

# Every `zizmor: ignore[...]` in the workflows, and why it stays (a new one fails the test).
IGNORES = {
    ("bot.yml", "dangerous-triggers"): "issue_comment is how /bot commands arrive; the job runs "
    "default-branch code only and authorizes the commenter before anything else",
    ("report.yml", "dangerous-triggers"): "workflow_run is GitHub's documented privileged "
    "follow-up of an unprivileged run; bot report-run validates the run and its artifacts",
}
# No concurrency group on purpose: groups are repository-wide and their names predictable, so any
# workflow (a fork PR's too) could join one and cancel the bot's runs (issue 28, finding 3).
for _name in ("bot.yml", "stage.yml", "report.yml"):
    IGNORES[(_name, "concurrency-limits")] = (
        "no concurrency group on purpose: anyone's workflow could join a predictable group and "
        "cancel the run; correctness does not depend on one (SECURITY.md, control 14)"
    )
