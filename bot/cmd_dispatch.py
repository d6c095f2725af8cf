"""`bot dispatch`: the plan job's last step. Starts the stage workflow for the pipeline that
`bot handle-event --out DIR` planned, and records the run GitHub created.

The stage workflow is dispatched on the stage branch (``stage_branch``, not the default branch:
its runs get a cache scope of their own, which no privileged run restores from), with the
plan run's id, the pipeline, the PR and the matrix as inputs. GitHub answers with the new run's
id (``return_run_details``), written to ``DIR/dispatch.json``, which the plan job uploads with
the plan: the report accepts results only from that run. Exits 0 (also when there is nothing to
run), 2 for bad input, 3 when GitHub refuses or stays unreachable (a gating pipeline's status
then turns from pending to error).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from stagebot.stages.errors import StagebotError

MAX_MATRIX = 60_000  # workflow_dispatch inputs share a 65,535-character payload


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
    from stagebot.bot.stage_runs import active_pipelines, stage_key, stage_title

    env = ActionsEnv.from_environ()
    config = load_config(config_path)
    outputs = json.loads((plan_dir / "outputs.json").read_text())
    if outputs.get("run") != "true":
        click.echo("no-op: nothing was planned to run")
        return
    if env.run_id is None:
        raise StagebotError("GITHUB_RUN_ID is not set: the stage run must name this plan run")
    pipeline, pr = int(outputs["pipeline"]), int(outputs["pr"]) if outputs.get("pr") else None
    matrix = outputs["matrix"]
    if len(matrix) > MAX_MATRIX:
        raise StagebotError(
            f"the matrix is {len(matrix)} characters, more than the {MAX_MATRIX} a "
            "workflow_dispatch carries: run fewer stages (--stage-list) in one pipeline"
        )
    api = connect(env, RetryPolicy.from_environ())
    inputs = {
        "plan-run": str(env.run_id),
        "pipeline": str(pipeline),
        "key": stage_key(pr),
        "matrix": matrix,
    }

    def landed() -> int | None:
        run = active_pipelines(api, config).get(pipeline)
        title = stage_title(pr, pipeline, env.run_id or 0)
        return run.id if run is not None and run.display_title == title else None

    try:
        run_id = api.dispatch_workflow(config.stage_workflow, config.stage_branch, inputs, landed)
    except GitHubError:
        _give_up(api, env, config, pipeline, outputs.get("commit") or "")
        raise
    record = {"stage_run_id": run_id, "pipeline": pipeline, "plan_run": env.run_id, "pr": pr}
    (plan_dir / "dispatch.json").write_text(json.dumps(record, indent=2) + "\n")
    click.echo(
        f"pipeline #{pipeline}: dispatched {config.stage_workflow} on {config.stage_branch} "
        f"as run {run_id}"
    )


def _give_up(api, env, config, pipeline: int, commit: str) -> None:
    """No stage run, so no report: a gating pipeline's `pending` becomes `error` (only while it
    is this pipeline's own status), rather than pending for ever."""
    own = f"PR_Github #{pipeline} "
    current = api.statuses(commit, config.status_context) if commit else []
    if current and current[0].description.startswith(own):
        text = f"{own}could not start its stage run: comment /bot run again"
        api.set_status(commit, "error", config.status_context, text, env.run_url)
