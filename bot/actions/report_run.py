"""The report workflow's work for one completed stage run (report.yml, on ``workflow_run``).

It runs default-branch code with the rights to reply and set statuses, so everything it reads
from the stage run is untrusted data, checked before use:

1. the run must be a run of the stage workflow, dispatched on the stage branch of this
   repository; its title names the pipeline and the plan run (bot/protocols/names.py);
2. that plan run must be one of the bot's plan runs (bot.yml on the default branch, started by a
   comment or a push) and its dispatch record must name this very run: a stage run the bot did
   not start is ignored, whatever its title says. The plan (plan.json) and the ledger come from
   the plan run's artifacts, which no PR code could write;
3. of the stage run's artifacts only the result artifact of a stage the plan ran is read, and of
   each only the files under ``<stage>/`` (bot/custody/artifact_zip.py); every other artifact or
   file is left out and named in the log;
4. then it publishes (bot/actions/publishing.py; cancelled run: ABORTED), with main's ledger,
   fetched from the bot's report runs, as the failure-analysis base.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from stagebot.bot.protocols.names import (
    MAIN_LEDGER,
    PLAN_ARTIFACT,
    ledger_artifact,
    ledger_digest,
    parse_title,
    result_stage,
)
from stagebot.stages.errors import StagebotError
from stagebot.stages.plan import Plan


class PlanArtifactsMissing(StagebotError):
    exit_code = 3


@dataclass(frozen=True)
class Reported:
    """What report.yml's next step needs: whether it published, and the ledger to upload."""

    ledger: Path | None = None
    ledger_artifact: str = ""

    def outputs(self) -> dict[str, str]:
        return {
            "published": "true" if self.ledger is not None else "false",
            "ledger": str(self.ledger or ""),
            "ledger_artifact": self.ledger_artifact,
        }


def report_stage_run(run_id: int, work: Path, env, config, say: Callable[[str], None]) -> Reported:
    """Validate stage run ``run_id`` against the bot's plan and publish it (see the module);
    ``say`` prints each line of the log as it happens. When GitHub keeps failing after the
    run's title was read, the pipeline's reply and gating status say the report could not be
    made and to re-run the report job (``_unreported``), and the error ends the job."""
    from stagebot.bot.github import GitHubError, RetryPolicy, connect
    from stagebot.bot.protocols.runs import stage_run_problem

    api = connect(env, RetryPolicy.from_environ())
    run = api.workflow_run(run_id)
    parsed = parse_title(run.display_title)
    why = stage_run_problem(run, config, api.repository)
    if why is None and parsed is None:
        why = f"run {run.id}'s title {run.display_title!r} names no pipeline and plan run"
    if why is not None:
        say(f"ignored: {why}; this is not a stage run the bot started, nothing is reported")
        return Reported()
    assert parsed is not None
    try:
        return _report(api, run, parsed, work, env, config, say)
    except GitHubError as error:
        for line in _unreported(api, run, parsed, env, config, error):
            say(line)
        raise


def _report(api, run, parsed, work: Path, env, config, say: Callable[[str], None]) -> Reported:
    """Check the plan run, read the plan and the results, publish (the module's steps 2-4)."""
    from stagebot.bot.actions.publishing import PublishRequest, publish
    from stagebot.bot.custody.files import file_digest
    from stagebot.bot.custody.transport import fetch_main_ledger
    from stagebot.bot.protocols.runs import plan_run_problem

    _, pipeline, plan_id = parsed
    plan_run = _completed(api, plan_id)
    why = plan_run_problem(plan_run, config, api.repository, api.default_branch())
    if why is None:
        plan_dir, ledger = _plan_artifacts(api, plan_id, work)
        dispatched = json.loads((plan_dir / "dispatch.json").read_text())
        if dispatched.get("stage_run_id") != run.id or dispatched.get("pipeline") != pipeline:
            why = (
                f"plan run {plan_id} dispatched run {dispatched.get('stage_run_id')} for "
                f"pipeline #{dispatched.get('pipeline')}, not run {run.id}"
            )
    if why is not None:
        say(f"ignored: {why}; this is not a stage run the bot started, nothing is reported")
        return Reported()
    plan = Plan.from_json(json.loads((plan_dir / "plan.json").read_text()))
    results = work / "results"
    lines, unreadable = _results(api, run.id, plan, results, work)
    for line in lines:
        say(line)
    base = work / "base.sqlite"
    if plan.pr:
        _, notes = fetch_main_ledger(api, config, base)
        say("\n".join(f"main's ledger: {note}" for note in notes))
    request = PublishRequest(
        pipeline=pipeline,
        results=results,
        ledger=ledger,
        plan_path=plan_dir / "plan.json",
        base_ledger=base if base.exists() else None,
        cancelled=run.conclusion == "cancelled",
        stage_run_id=run.id,
        unreadable=unreadable,
    )
    say("\n".join(publish(request, env, config)))
    name = ledger_artifact(file_digest(ledger)) if plan.pr else MAIN_LEDGER
    return Reported(ledger, name)


def _unreported(api, run, parsed, env, config, error: Exception) -> list[str]:
    """GitHub kept failing while the report was made: say so where the pipeline is watched,
    rather than leave its reply RUNNING and its status pending for ever. Only a PR pipeline
    whose reply still says RUNNING, or ABORTED by a kill (whose cancelled run is reported as
    ABORTED), and records this very run (``stage_run``, written by the bot's dispatch: a decoy
    titled like the bot's run is not it) is touched; its status only while it is this
    pipeline's pending one. The reply's marker keeps its state, so a re-run of the report job
    publishes over both. Returns the log's lines."""
    from stagebot.bot.comments.replies import our_replies, reply_for_pipeline, with_note
    from stagebot.bot.github import GitHubError
    from stagebot.harness.report.status_text import owns, unreported

    key, pipeline, _ = parsed
    if not key.startswith("pr-"):
        return [f"pipeline #{pipeline} ({key}) could not be reported: re-run the report job"]
    pr = int(key.removeprefix("pr-"))
    lines = []
    try:
        reply = reply_for_pipeline(our_replies(api.comments(pr), config.bot_login), pipeline)
        if (
            reply is None
            or reply.marker.state not in ("RUNNING", "ABORTED")
            or reply.marker.stage_run != run.id
        ):
            return [
                f"pipeline #{pipeline} of PR #{pr} has no reply that says RUNNING or ABORTED "
                f"for run {run.id}: its reply and status are left alone"
            ]
        commit = reply.marker.commit
        current = api.statuses(commit, config.status_context)
        if current and current[0].state == "pending" and owns(current[0].description, pipeline):
            api.set_status(
                commit, "error", config.status_context, unreported(pipeline), env.run_url
            )
            lines.append(f"status {config.status_context!r} set to error on {commit[:7]}")
        note = (
            f"This pipeline could not be reported: {error}. Its stage run {run.id} finished; "
            f"re-run the report job (workflow run {env.run_id}) to publish it. The "
            f"{config.status_context} status says error until then."
        )
        api.edit_comment(reply.comment.id, with_note(reply.comment.body, note))
        lines.append(f"reply {reply.comment.id} says the report could not be made")
    except GitHubError as again:
        lines.append(f"could not say that the report failed either: {again}")
    return lines


def _completed(api, run_id: int):
    """The run once it has completed: the plan job uploads the plan after it dispatched, so a
    fast stage run can finish first (waits up to STAGEBOT_PLAN_WAIT_S, default 600 s)."""
    limit = float(os.environ.get("STAGEBOT_PLAN_WAIT_S") or 600)
    deadline = time.monotonic() + limit
    run = api.workflow_run(run_id)
    while run.status != "completed" and time.monotonic() < deadline:
        time.sleep(min(10.0, max(0.0, deadline - time.monotonic())))
        run = api.workflow_run(run_id)
    return run


def _plan_artifacts(api, plan_id: int, work: Path) -> tuple[Path, Path]:
    """(the folder of plan.json and dispatch.json, the ledger file) from the plan run."""
    from stagebot.bot.custody.artifact_zip import unpack
    from stagebot.bot.custody.transport import read_ledger

    artifacts = {a.name: a for a in api.run_artifacts(plan_id) if not a.expired}
    plan = artifacts.get(PLAN_ARTIFACT)
    ledgers = [a for name, a in artifacts.items() if ledger_digest(name)]
    if plan is None or len(ledgers) != 1:
        raise PlanArtifactsMissing(
            f"plan run {plan_id} left no {PLAN_ARTIFACT} artifact or not exactly one ledger "
            f"artifact ({', '.join(sorted(artifacts)) or 'none'}): the pipeline cannot be "
            "reported; comment /bot run again"
        )
    plan_dir = work / "plan"
    unpack(_download(api, plan, work), plan_dir)
    for needed in ("plan.json", "dispatch.json"):
        if not (plan_dir / needed).is_file():
            raise PlanArtifactsMissing(
                f"the {PLAN_ARTIFACT} artifact of run {plan_id} has no {needed}"
            )
    (ledger_art,) = ledgers
    ledger = work / "ledger.sqlite"
    ledger.write_bytes(read_ledger(api, ledger_art, ledger_digest(ledger_art.name)))
    return plan_dir, ledger


def _download(api, artifact, work: Path) -> Path:
    """Stream ``artifact``'s zip into a file under ``work`` (bounded, retried): its path."""
    from stagebot.bot.custody.transport import MAX_ZIP

    path = work / "zips" / f"{artifact.id}.zip"
    path.parent.mkdir(parents=True, exist_ok=True)
    api.download_artifact(artifact.id, MAX_ZIP, path)
    return path


def _results(
    api, run_id: int, plan: Plan, folder: Path, work: Path
) -> tuple[list[str], dict[str, str]]:
    """Unpack each planned shard's result artifact under ``folder/<stage>/``: (what was left
    out, stage -> why its artifact could not be read). A shard whose artifact GitHub would not
    hand over, or that is not a readable zip, is that shard's recorded ERROR (the intake), and
    nothing half-unpacked of it is kept."""
    from stagebot.bot.custody.artifact_zip import ArtifactError, unpack
    from stagebot.bot.github import GitHubError

    planned = {shard.stage for shard in plan.shards_to("run")}
    folder.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    unreadable: dict[str, str] = {}
    for artifact in api.run_artifacts(run_id):
        stage = result_stage(artifact.name)
        if stage not in planned:
            lines.append(f"ignored artifact {artifact.name!r}: not the result of a planned shard")
            continue
        planned.discard(stage)  # one artifact per shard (names are unique within a run)
        try:
            done = unpack(_download(api, artifact, work), folder, prefix=stage)
        except GitHubError as error:
            unreadable[stage] = f"its result artifact could not be downloaded ({error})"
        except ArtifactError as error:
            unreadable[stage] = f"its result artifact could not be read ({error})"
        else:
            lines += [f"ignored {name} in artifact {artifact.name!r}" for name in done.ignored]
            continue
        shutil.rmtree(folder / stage, ignore_errors=True)
        lines.append(f"artifact {artifact.name!r}: {unreadable[stage]}")
    return lines, unreadable
