"""`bot report-run --run-id N`: the report workflow (report.yml, on ``workflow_run``) for one
completed stage run: validate it against the bot's plan, then publish (bot/actions/report_run.py).

Writes ``published``, ``ledger`` (the file to upload) and ``ledger_artifact`` (its artifact
name) to GITHUB_OUTPUT. Exits 0 when it published or ignored the run, 3 when GitHub stayed
unreachable (the pipeline's reply and pending status then say it could not be reported and to
re-run the report job, where GitHub lets them be written) or the plan run's artifacts are
missing, 2 for bad input.
"""

from __future__ import annotations

from pathlib import Path

import click


@click.command("report-run")
@click.option("--run-id", type=click.IntRange(min=1), required=True, help="The stage run.")
@click.option(
    "--work",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".stagebot"),
    show_default=True,
    help="Scratch folder for the downloaded plan, ledgers and results.",
)
@click.option("--config", "config_path", type=click.Path(path_type=Path), default=None)
def report_run(run_id: int, work: Path, config_path: Path | None) -> None:
    """Validate a completed stage run's artifacts against the bot's plan, then publish."""
    from stagebot.bot.actions.report_run import report_stage_run
    from stagebot.bot.config import load_config
    from stagebot.bot.github import ActionsEnv
    from stagebot.bot.protocols.outputs import write_outputs

    env = ActionsEnv.from_environ()
    reported = report_stage_run(run_id, work, env, load_config(config_path), click.echo)
    write_outputs(env.output, reported.outputs())
