"""`bot dispatch`: the plan job's last step. Starts the stage workflow for the pipeline that
`bot handle-event --out DIR` planned, one run per stage, and records the runs GitHub created.

Each stage runs in a stage run of its own: a stage run's completion starts a report run
(report.yml, on ``workflow_run``), so each finished stage is reported as it ends (a partial
reply) and a NEW failure can cancel the stages still running (fail-fast), while the stage jobs
still hold no token. The runs are dispatched on the stage branch (``stage_branch``, not the
default branch: their runs get a cache scope of their own, which no privileged run restores
from), with the plan run's id, the pipeline, the PR, the stage's place in the plan (``part``:
the runs' titles differ) and its matrix entry as inputs. GitHub answers with each new run's id
(``return_run_details``), written to ``DIR/dispatch.json`` (stage -> run id), which the plan job
uploads with the plan: the report accepts results only from those runs, each only for its own
stage. The ids also go into the pipeline's reply marker (``stage_runs``): the only runs /bot
kill and a superseding /bot run cancel; a pipeline killed before or while it is dispatched gets
no stage run (or has them cancelled). Exits 0 (also when there is nothing to run), 2 for bad
input, 3 when GitHub refuses or stays unreachable (the runs already dispatched are cancelled; a
gating pipeline's status then turns from pending to error).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from stagebot.bot.protocols.dispatch_inputs import MAX_MATRIX, NO_STAGE
from stagebot.stages.errors import StagebotError


@click.command("dispatch")
@click.option(
    "--plan-dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    required=True,
    help="The folder `bot handle-event --out` wrote (outputs.json).",
)
@click.option("--config", "config_path", type=click.Path(path_type=Path), default=None)
def dispatch(plan_dir: Path, config_path: Path | None) -> None:
    """Start the stage workflow for the planned pipeline; write dispatch.json."""
    from stagebot.bot.config import load_config
    from stagebot.bot.github import ActionsEnv, GitHubError, RetryPolicy, connect
    from stagebot.bot.protocols.names import stage_key, stage_title
    from stagebot.bot.protocols.runs import dispatched_run

    env = ActionsEnv.from_environ()
    config = load_config(config_path)
    outputs = json.loads((plan_dir / "outputs.json").read_text())
    if outputs.get("run") != "true":
        click.echo("no-op: nothing was planned to run")
        return
    if env.run_id is None:
        raise StagebotError("GITHUB_RUN_ID is not set: the stage run must name this plan run")
    pipeline, pr = int(outputs["pipeline"]), int(outputs["pr"]) if outputs.get("pr") else None
    entries = json.loads(outputs["matrix"])
    for entry in entries:
        if len(json.dumps([entry], separators=(",", ":"))) > MAX_MATRIX:
            raise StagebotError(
                f"stage {entry.get('stage')!r}'s matrix entry is more than the {MAX_MATRIX} "
                "characters a workflow_dispatch carries: run fewer tests in one stage"
            )
    api = connect(env, RetryPolicy.from_environ())
    if pr is not None and not _still_running(api, config, pr, pipeline):
        click.echo(f"no-op: pipeline #{pipeline} was killed or superseded before its stage run")
        return

    runs: dict[str, int] = {}
    # every shard reused: one run with no job still starts the report that publishes them
    parts = [(entry["stage"], [entry]) for entry in entries] or [(NO_STAGE, [])]
    for part, (stage, matrix) in enumerate(parts, start=1):
        inputs = {
            "plan-run": str(env.run_id),
            "pipeline": str(pipeline),
            "key": stage_key(pr),
            "part": str(part),
            "matrix": json.dumps(matrix, separators=(",", ":")),
        }
        title = stage_title(pr, pipeline, env.run_id, part)
        try:
            runs[stage] = api.dispatch_workflow(
                config.stage_workflow,
                config.stage_branch,
                inputs,
                lambda title=title: dispatched_run(api, config, title),
            )
        except GitHubError:
            _cancel_each(api, runs.values())
            _give_up(api, env, config, pipeline, outputs.get("commit") or "")
            raise
    record = {"stage_runs": runs, "pipeline": pipeline, "plan_run": env.run_id, "pr": pr}
    (plan_dir / "dispatch.json").write_text(json.dumps(record, indent=2) + "\n")
    listed = ", ".join(f"{stage} as run {run_id}" for stage, run_id in runs.items())
    click.echo(
        f"pipeline #{pipeline}: dispatched {config.stage_workflow} on {config.stage_branch}, "
        f"one run per stage: {listed}"
    )
    if pr is not None and not _record_stage_runs(api, config, pr, pipeline, list(runs.values())):
        for run_id in runs.values():
            api.cancel_run(run_id)
        click.echo(
            f"pipeline #{pipeline} was killed or superseded meanwhile: its stage runs cancelled"
        )


def _still_running(api, config, pr: int, pipeline: int) -> bool:
    """Whether the pipeline's reply still says RUNNING (a /bot kill or a newer /bot run may have
    marked it ABORTED since handle-event)."""
    from stagebot.bot.comments.replies import our_replies, reply_for_pipeline

    reply = reply_for_pipeline(our_replies(api.comments(pr), config.bot_login), pipeline)
    return reply is not None and reply.marker.state == "RUNNING"


def _record_stage_runs(api, config, pr: int, pipeline: int, run_ids: list[int]) -> bool:
    """Record ``run_ids`` in the pipeline's reply marker: the only runs /bot kill and a
    superseding /bot run cancel (they never look runs up by title). False when the reply no
    longer says RUNNING, before or right after the edit: the caller then cancels the runs."""
    from dataclasses import replace

    from stagebot.bot.comments.replies import our_replies, reply_for_pipeline
    from stagebot.bot.protocols.marker import with_marker

    reply = reply_for_pipeline(our_replies(api.comments(pr), config.bot_login), pipeline)
    if reply is None or reply.marker.state != "RUNNING":
        return False
    marker = replace(reply.marker, stage_runs=tuple(run_ids))
    api.edit_comment(reply.comment.id, with_marker(reply.comment.body, marker))
    return _still_running(api, config, pr, pipeline)


def _cancel_each(api, run_ids) -> None:
    """Cancel the runs already dispatched, each on its own: GitHub is likely still failing, and
    one refused cancel must not keep the others running or the status from turning to error."""
    from stagebot.bot.github import GitHubError

    for run_id in run_ids:
        try:
            api.cancel_run(run_id)
        except GitHubError as error:
            click.echo(f"stage run {run_id} could not be cancelled ({error}): cancel it by hand")


def _give_up(api, env, config, pipeline: int, commit: str) -> None:
    """No stage run, so no report: a gating pipeline's `pending` becomes `error` (only while it
    is this pipeline's own status), rather than pending for ever."""
    from stagebot.harness.report.status_text import gave_up, owns

    current = api.statuses(commit, config.status_context) if commit else []
    if current and owns(current[0].description, pipeline):
        text = gave_up(pipeline)
        api.set_status(commit, "error", config.status_context, text, env.run_url)
