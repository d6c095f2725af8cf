"""The report workflow's work for one completed stage run (report.yml, on ``workflow_run``): the
pipeline's partial report while its other stage runs (one per stage) still run, its final report
once they have all finished.

It runs default-branch code with the rights to reply and set statuses, so everything it reads
from the stage run is untrusted data, checked before use:

1. the run must be a run of the stage workflow, dispatched on the stage branch of this
   repository; its title names the pipeline and the plan run (bot/protocols/names.py);
2. that plan run must be one of the bot's plan runs (bot.yml on the default branch, started by a
   comment or a push) and its dispatch record must name this very run: a stage run the bot did
   not start is ignored, whatever its title says. The plan (plan.json), the dispatch record
   (stage -> run id) and the ledger come from the plan run's artifacts, which no PR code could
   write;
3. the report is rebuilt from every finished stage run the dispatch record names (a report job
   keeps no state: the runs and their artifacts say it all); of each run only the result
   artifact of the stage it was dispatched for is read, and of that only the files under
   ``<stage>/`` (bot/custody/artifact_zip.py); every other artifact or file is left out and named
   in the log;
4. while stage runs still run: a finished stage with a NEW failure (harness/pipeline/fail_fast.py,
   the rule `bot run` follows) makes this job cancel the others (it holds the token; the stage
   jobs hold none), unless the command said --disable-fail-fast or it is main's post-merge
   pipeline, which never fails fast (every PR's verdict is read against it), and the reply
   becomes the partial report (bot/actions/partial_reply.py). Then the stage runs are looked at
   again: what finished meanwhile is reported by this job too, so the last writer always knew
   the most;
5. once all have finished, it publishes (bot/actions/publishing.py), with main's ledger, fetched
   from the bot's report runs, as the failure-analysis base: a stage fail-fast cancelled is
   ABORTED with the reason (never "passed" for reuse: the next /bot run runs it), any other
   cancelled stage run makes the pipeline ABORTED.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from stagebot.bot.protocols.dispatch_inputs import NO_STAGE
from stagebot.bot.protocols.names import (
    MAIN_LEDGER,
    PLAN_ARTIFACT,
    ledger_artifact,
    ledger_digest,
    parse_title,
    result_stage,
)
from stagebot.harness.pipeline.intake import CANCELLED
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
    """Check the plan run, read the plan, then report the pipeline's stage runs (the module's
    steps 2-5)."""
    from stagebot.bot.custody.transport import fetch_main_ledger
    from stagebot.bot.protocols.runs import plan_run_problem

    _, pipeline, plan_id = parsed
    plan_run = _completed(api, plan_id)
    why = plan_run_problem(plan_run, config, api.repository, api.default_branch())
    if why is None:
        plan_dir, ledger = _plan_artifacts(api, plan_id, work)
        dispatched = json.loads((plan_dir / "dispatch.json").read_text())
        runs = _dispatched_runs(dispatched, plan_dir)
        if (
            not isinstance(runs, dict)
            or run.id not in runs.values()
            or dispatched.get("pipeline") != pipeline
        ):
            why = (
                f"plan run {plan_id} dispatched runs {runs} for pipeline "
                f"#{dispatched.get('pipeline')}, not run {run.id} for #{pipeline}"
            )
    if why is not None:
        say(f"ignored: {why}; this is not a stage run the bot started, nothing is reported")
        return Reported()
    plan = Plan.from_json(json.loads((plan_dir / "plan.json").read_text()))
    base = work / "base.sqlite"
    if plan.pr:
        _, notes = fetch_main_ledger(api, config, base)
        say("\n".join(f"main's ledger: {note}" for note in notes))
    context = _Context(
        api, env, config, plan, pipeline, plan_dir, ledger, base if base.exists() else None
    )
    seen = None
    for attempt in range(1, ROUNDS + 1):
        stage_runs = _stage_runs(api, config, runs, plan_run.created_at, say)
        finished = _finished(stage_runs)
        if finished == seen:
            break  # nothing finished since this job last wrote: the reply is up to date
        if finished == set(stage_runs):
            return _final(context, stage_runs, work / f"round-{attempt}", say)
        seen = _partial(context, stage_runs, work / f"round-{attempt}", say)
    return Reported()


ROUNDS = 4  # a report job looks at the stage runs again after writing, at most this often


@dataclass(frozen=True)
class _Context:
    """What every round of one report job shares: GitHub, the plan and the plan job's files."""

    api: object
    env: object
    config: object
    plan: Plan
    pipeline: int
    plan_dir: Path
    ledger: Path  # the plan job's ledger, as downloaded (each round works on a copy)
    base: Path | None  # main's ledger, when fetched


def _dispatched_runs(dispatched: dict, plan_dir: Path):
    """Stage -> run id from the plan's dispatch record. A plan run from before one run per stage
    recorded its one run as ``stage_run_id``: every stage of its matrix ran there (each stage's
    result is still read only from its own artifact), so a pipeline in flight at the upgrade
    still gets its report."""
    if "stage_runs" in dispatched or "stage_run_id" not in dispatched:
        return dispatched.get("stage_runs")
    plan = Plan.from_json(json.loads((plan_dir / "plan.json").read_text()))
    stages = [shard.stage for shard in plan.shards_to("run")] or [NO_STAGE]
    return dict.fromkeys(stages, dispatched["stage_run_id"])


def _stage_runs(api, config, runs: dict[str, int], since: str, say: Callable[[str], None]) -> dict:
    """stage -> its stage run (RunInfo) now, for the runs the plan job's dispatch recorded. One
    listing of the stage workflow's runs dispatched since the plan run was created reads them
    all (a request per run would make a pipeline of N stages cost ~N² requests over its N report
    jobs); a recorded run the listing does not show (or a plan run without its creation time)
    is read on its own."""
    listed = {}
    if since:
        listed = {
            r.id: r for r in api.dispatched_runs(config.stage_workflow, config.stage_branch, since)
        }
    found = {
        stage: listed[run_id] if run_id in listed else api.workflow_run(run_id)
        for stage, run_id in runs.items()
    }
    waiting = [stage for stage, r in found.items() if r.status != "completed"]
    say(f"{len(found) - len(waiting)} of {len(found)} stage run(s) finished")
    return found


def _observe(context: _Context, stage_runs: dict, folder: Path, say: Callable[[str], None]):
    """The finished stage runs' results taken into a copy of the plan job's ledger (pipeline
    left RUNNING): (its Report, the fail-fast verdict, the results folder, stage -> why its
    artifact could not be read)."""
    from stagebot.bot.actions.publishing import job_links
    from stagebot.bot.comments.events import default_branch
    from stagebot.harness.ledger.book import Ledger
    from stagebot.harness.pipeline.conclude import observe

    finished = _finished(stage_runs)
    results = folder / "results"
    lines, unreadable = _results(context.api, stage_runs, finished, results, folder)
    for line in lines:
        say(line)
    ledger = folder / "ledger.sqlite"
    shutil.copyfile(context.ledger, ledger)
    links, warning = job_links(context.api, [r.id for r in stage_runs.values()])
    for line in warning:
        say(line)
    main_book = Ledger.open(context.base, readonly=True) if context.base else None
    try:
        with Ledger.open(ledger) as book:
            report, base = observe(
                book,
                context.pipeline,
                results,
                finished=finished,
                plan_path=context.plan_dir / "plan.json",
                unreadable=unreadable,
                aborted=dict.fromkeys(_cancelled(stage_runs), CANCELLED),  # fail-fast's or not
                default_branch=default_branch(context.env.event_path),
                main_book=main_book,
                log_links=links,
            )
            record = book.pipeline(report.pipeline, with_results=False)
    finally:
        if main_book is not None:
            main_book.close()
    condemned = _condemned(report, base, record, finished)
    return report, condemned, results, unreadable


def _finished(stage_runs: dict) -> frozenset[str]:
    return frozenset(s for s, r in stage_runs.items() if r.status == "completed")


def _cancelled(stage_runs: dict) -> set[str]:
    """The stages whose run was cancelled (by fail-fast, a kill or a newer pipeline)."""
    return {s for s, r in stage_runs.items() if r.conclusion == "cancelled"}


def _condemned(report, base, record, finished: set[str]):
    """The first finished stage with a NEW failure (harness/pipeline/fail_fast.py, the rule
    `bot run` follows), or None."""
    from stagebot.harness.pipeline.fail_fast import first_condemned

    return first_condemned(
        [r for r in report.results if r.stage in finished and r.state != "REUSED"],
        base=base,
        changed_files=report.changed_files,
        stage_paths=(record.meta or {}).get("stage_paths"),
        root=None,
    )


def _fail_fast(context: _Context) -> bool:
    """Whether fail-fast is on: for a PR's pipeline unless its command said
    --disable-fail-fast; never for main's post-merge pipelines, the base every PR's verdict and
    flakiness history are read from (a stage cancelled on main leaves the PRs without one)."""
    if context.plan.pr is None:
        return False
    command = context.plan.parsed_command()
    return not (command.run is not None and command.run.disable_fail_fast)


def _partial(context: _Context, stage_runs: dict, folder: Path, say) -> frozenset[str]:
    """A partial report (bot/actions/partial_reply.py); with a NEW failure and fail-fast on,
    the stage runs still running are cancelled first. Returns the stages found finished."""
    from stagebot.bot.actions.partial_reply import Progress, publish_partial

    report, condemned, _, _ = _observe(context, stage_runs, folder, say)
    finished = _finished(stage_runs)
    order = [s.stage for s in context.plan.shards_to("run")]
    running = [s for s in order if s not in finished]
    cancelled: list[str] = []
    if condemned is not None and _fail_fast(context):
        for stage in running:
            if context.api.cancel_run(stage_runs[stage].id):
                say(f"fail-fast: cancelled {stage} (run {stage_runs[stage].id}): {condemned}")
        cancelled = [s for s in order if s in running or s in _cancelled(stage_runs)]
    progress = Progress(
        done=[s for s in order if s in finished],
        running=running,
        cancelled=cancelled,
        condemned=condemned,
        expected_s=_expected_seconds(context, running),
        elapsed_s=_elapsed_seconds(stage_runs, running),
    )
    if context.plan.pr is None:
        say(f"pipeline #{report.pipeline} (main): {len(progress.done)} stage(s) done, no reply")
        if condemned is not None:
            say(f"{condemned}: main's pipelines never fail fast (every PR's base), none cancelled")
    else:
        for line in publish_partial(context.api, context.env, context.config, report, progress):
            say(line)
    return finished


def _expected_seconds(context: _Context, stages: list[str]) -> dict[str, float | None]:
    """stage -> what its last full run took, in the PR's ledger or else in main's (None when
    neither has one): the partial report's estimate of when the running stages end."""
    from stagebot.harness.ledger.book import Ledger

    books = [context.ledger] + ([context.base] if context.base else [])
    expected: dict[str, float | None] = dict.fromkeys(stages)
    for path in books:
        with Ledger.open(path, readonly=True) as book:
            for stage in stages:
                expected[stage] = expected[stage] or book.shard_duration(stage)
    return expected


def _elapsed_seconds(stage_runs: dict, stages: list[str]) -> dict[str, float]:
    """stage -> how long ago its run started (GitHub's ``run_started_at``), for the stages whose
    run says so: the estimate counts only what is left of their last full run."""
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    elapsed = {}
    for stage in stages:
        started = stage_runs[stage].started_at
        if started:
            when = datetime.fromisoformat(started.replace("Z", "+00:00"))
            elapsed[stage] = max(0.0, (now - when).total_seconds())
    return elapsed


def _final(context: _Context, stage_runs: dict, folder: Path, say) -> Reported:
    """Every stage run has finished: conclude the pipeline and publish its report. A stage run
    cancelled after a finished stage had a NEW failure (fail-fast on) is ABORTED with that
    reason and the pipeline is decided by its results; any other cancelled run (a kill, a newer
    pipeline) makes the pipeline ABORTED, as a cancelled run always did."""
    from stagebot.bot.actions.publishing import PublishRequest, publish
    from stagebot.bot.custody.files import file_digest
    from stagebot.harness.results import fail_fast_evidence

    report, condemned, results, unreadable = _observe(context, stage_runs, folder, say)
    cancelled = _cancelled(stage_runs)
    aborted = {}
    if condemned is not None and _fail_fast(context):
        aborted = dict.fromkeys(cancelled, fail_fast_evidence(str(condemned)))
    ledger = folder / "final.sqlite"
    shutil.copyfile(context.ledger, ledger)
    request = PublishRequest(
        pipeline=report.pipeline,
        results=results,
        ledger=ledger,
        plan_path=context.plan_dir / "plan.json",
        base_ledger=context.base,
        cancelled=bool(cancelled) and not aborted,
        aborted=aborted,
        stage_runs=tuple(r.id for r in stage_runs.values()),
        unreadable=unreadable,
    )
    say("\n".join(publish(request, context.env, context.config)))
    name = ledger_artifact(file_digest(ledger)) if context.plan.pr else MAIN_LEDGER
    return Reported(ledger, name)


def _unreported(api, run, parsed, env, config, error: Exception) -> list[str]:
    """GitHub kept failing while the report was made: say so where the pipeline is watched,
    rather than leave its reply RUNNING and its status pending for ever. Only a PR pipeline
    whose reply still says RUNNING, or ABORTED by a kill (whose cancelled run is reported as
    ABORTED), and records this very run (``stage_runs``, written by the bot's dispatch: a decoy
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
            or run.id not in reply.marker.stage_runs
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
    api, stage_runs: dict, finished: set[str], folder: Path, work: Path
) -> tuple[list[str], dict[str, str]]:
    """Unpack each finished stage run's result artifact (``stagebot-result-<its stage>``, from
    that run only) under ``folder/<stage>/``: (what was left out, stage -> why its artifact
    could not be read). A shard whose artifact GitHub would not hand over, or that is not a
    readable zip, is that shard's recorded ERROR (the intake), and nothing half-unpacked of it
    is kept."""
    from stagebot.bot.custody.artifact_zip import ArtifactError, unpack
    from stagebot.bot.github import GitHubError

    folder.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    unreadable: dict[str, str] = {}
    for stage in sorted(finished):
        wanted = True  # one artifact per shard (names are unique within a run)
        for artifact in api.run_artifacts(stage_runs[stage].id):
            if not wanted or result_stage(artifact.name) != stage:
                lines.append(
                    f"ignored artifact {artifact.name!r} of run {stage_runs[stage].id}: not "
                    f"the result of {stage}, the one stage that run was dispatched for"
                )
                continue
            wanted = False
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
