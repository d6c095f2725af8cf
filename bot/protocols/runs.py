"""Which workflow runs are the bot's own, and which stage run belongs to which pipeline.

The plan job (bot.yml, default-branch code) starts one run of the stage workflow per pipeline
with ``workflow_dispatch`` on the stage branch; the run's title (stage.yml's ``run-name``) names
the PR, the pipeline and the plan run (bot/protocols/names.py formats and parses it). The title is
set by whoever dispatched, so it only tells the report where to look: a stage run counts only
when the plan run it names is one of the bot's own runs and that run's dispatch record holds
this stage run's id. /bot kill and a superseding /bot run never look runs up by title: they
cancel the run id `bot dispatch` recorded in the pipeline's reply marker.
"""

from __future__ import annotations

from stagebot.bot.config import BotConfig
from stagebot.bot.github import GitHubApi, RunInfo

PLAN_EVENTS = ("issue_comment", "push")


def workflow_path(name: str) -> str:
    return f".github/workflows/{name}"


def own_run_problem(
    run: RunInfo, workflows: tuple[str, ...], events: tuple[str, ...], repository: str, branch: str
) -> str | None:
    """Why ``run`` is not a run of one of ``workflows`` from ``repository``'s ``branch`` started by
    one of ``events`` (i.e. the bot's own code, as reviewed there), or None when it is."""
    paths = [workflow_path(w) for w in workflows]
    if run.path not in paths:
        return f"run {run.id} ran {run.path or 'an unknown workflow'}, not {' or '.join(paths)}"
    if run.event not in events:
        return f"run {run.id} was started by {run.event}, not {' or '.join(events)}"
    if run.head_repo != repository:
        return f"run {run.id} ran code of {run.head_repo or 'an unknown repository'}"
    if run.head_branch != branch:
        return f"run {run.id} ran the workflow of {run.head_branch!r}, not of {branch!r}"
    return None


def stage_run_problem(run: RunInfo, config: BotConfig, repository: str) -> str | None:
    """Why ``run`` is not a run of the stage workflow as the bot dispatches it, or None."""
    return own_run_problem(
        run, (config.stage_workflow,), ("workflow_dispatch",), repository, config.stage_branch
    )


def plan_run_problem(
    run: RunInfo, config: BotConfig, repository: str, default_branch: str
) -> str | None:
    """Why ``run`` is not one of the bot's plan runs (bot.yml on the default branch)."""
    return own_run_problem(run, (config.workflow,), PLAN_EVENTS, repository, default_branch)


def dispatched_run(api: GitHubApi, config: BotConfig, title: str) -> int | None:
    """The id of the queued or running stage run titled ``title`` when exactly one run of the
    stage workflow as the bot dispatches it (workflow_dispatch, stage branch, this repository)
    has it: how `bot dispatch` recognises its own run after an ambiguous failure. The title
    names this plan run, so no other pipeline's run matches; a `pull_request` run of a PR's copy
    of stage.yml titled alike fails the check."""
    found = [
        run.id
        for run in api.active_runs(config.stage_workflow)
        if run.display_title == title and stage_run_problem(run, config, api.repository) is None
    ]
    return found[0] if len(found) == 1 else None
