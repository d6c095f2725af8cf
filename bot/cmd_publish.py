"""`bot publish`: the Actions report job. Records the stage jobs' StageResults into the ledger,
renders the report, edits the pipeline's one reply into it and sets the gating status.

- Shards the plan reused are recorded REUSED (their passed tests copied from the source
  pipeline); shards whose job left no ``result.json`` are ABORTED when the run was cancelled
  (``--cancelled``), else ERROR with that as the evidence. Only ``<planned stage>/result.json``
  counts, one per planned shard; it must be schema-valid and name its folder's stage and shard.
  A file that is not (truncated, not UTF-8, a mistyped field, another shard's claim) makes only
  its shard ERROR ("result.json unreadable: …", an infrastructure failure); any other
  ``result.json`` (an unplanned folder, a second copy deeper down) is ignored and listed in the
  report. The stage jobs run PR code: nothing they write can add or replace a shard's result.
- The reply is found by the id the plan job recorded, else by its marker's pipeline number; a
  missing reply is posted (once: the marker makes the post idempotent).
- The status is set only for gating plans, and only while the newest status of the context is
  this pipeline's own (a newer pipeline or a skip is never overwritten). ``Report.status``
  decides it, the reply says it: SUCCESS -> success; FAILURE -> failure; ABORTED, NOT_RUN or
  shards that could not run -> error. GitHub has no conditional status write, so the statuses
  are read again after the write: a newer pipeline's status or a person's skip / reuse that
  landed in between is posted again on top.
- The reply records the sha256 of the ledger as this job leaves it (a hidden line before the
  marker); `bot handle-event` accepts the next restored ledger only when it matches. A
  post-merge pipeline records it as the ``stagebot/ledger`` status of its commit instead, and
  ``--base-ledger`` (main's) is used only when such a status vouches for it (bot/main_ledger.py).
- With ``--artifact-digest`` (the plan job's output), plan.json and the ledger must be what the
  plan job left: a replaced artifact publishes nothing (exit 3), so the status stays pending.
- Exits 0 once published (whatever the pipeline's state); 3 when GitHub stayed unreachable or
  the artifact does not match its digest, 2 for bad input.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import click

from stagebot.stages.errors import StagebotError


@click.command("publish")
@click.option(
    "--results",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Folder of the stage jobs' shard folders (result.json, tests.jsonl, …); may be empty.",
)
@click.option(
    "--ledger",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The PR's ledger, as the plan job left it.",
)
@click.option(
    "--plan",
    "plan_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="plan.json from `bot handle-event --out` (used when the ledger lacks the pipeline).",
)
@click.option(
    "--base-ledger",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The default branch's ledger, read-only (absent file: compare within --ledger).",
)
@click.option(
    "--pipeline",
    type=click.IntRange(min=1),
    default=None,
    help="The pipeline number (default: GITHUB_RUN_NUMBER).",
)
@click.option("--cancelled", is_flag=True, help="The workflow run was cancelled: ABORTED.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Also write report.md and report.html here.",
)
@click.option("--config", "config_path", type=click.Path(path_type=Path), default=None)
@click.option(
    "--artifact-digest",
    default=None,
    metavar="SHA256",
    help="The plan job's artifact_digest output: --plan and --ledger must match it, or nothing "
    "is published (exit 3).",
)
@click.option(
    "--stage-run-id",
    type=click.IntRange(min=1),
    default=None,
    help="The workflow run whose jobs ran the stages (their pages are the full logs the report "
    "links; default: this run, GITHUB_RUN_ID).",
)
def publish(
    results,
    ledger,
    plan_path,
    base_ledger,
    pipeline,
    cancelled,
    out,
    config_path,
    artifact_digest,
    stage_run_id=None,
    unreadable=None,
):
    """Record StageResults, render the report, edit the reply, set the status."""
    # unreadable (from `bot report-run`, not an option): stage -> why its result artifact could
    # not be downloaded or read; that shard is an ERROR with this evidence
    from stagebot.bot.base import select_base
    from stagebot.bot.config import load_config
    from stagebot.bot.github import ActionsEnv, RetryPolicy, connect
    from stagebot.bot.ledger_files import file_digest
    from stagebot.harness.ledger import Ledger
    from stagebot.harness.report import render_report, report_from_record

    env = ActionsEnv.from_environ()
    config = load_config(config_path)
    number = pipeline or env.run_number
    if number is None:
        raise click.UsageError("give --pipeline N (or set GITHUB_RUN_NUMBER)")
    if artifact_digest is not None:
        _check_artifact(artifact_digest, plan_path, ledger)
    api = connect(env, RetryPolicy.from_environ())
    base_book, lines = _main_ledger(api, base_ledger)  # before the ledger changes: may exit 3
    book = Ledger.open(ledger)
    record = book.pipeline(number, with_results=False)
    if record is None:
        record = _start_from_plan(book, number, plan_path)
    plan = record.plan or {}
    ignored = _record_results(book, number, plan, Path(results), cancelled, unreadable or {})
    base = select_base(
        book,
        base_book=base_book,
        base_commit=record.base_commit,
        default_branch=default_branch(env.event_path),
        exclude=number,
    )
    record = book.pipeline(number)
    links, warning = _job_links(api, stage_run_id or env.run_id)
    lines += warning
    report = report_from_record(record, base=base, cancelled=cancelled, log_links=links)
    book.finish_pipeline(
        number,
        report.analysis.state,
        meta={"base_pipeline": base.pipeline, "ignored_results": ignored},
    )
    report.ignored_results = ignored
    report.state = report.analysis.state
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.md").write_text(render_report(report, "md"))
        (out / "report.html").write_text(render_report(report, "html"))
    lines.insert(0, f"pipeline #{number}: {report.state}")
    book.close()  # final: the bytes the report job saves for the PR's next pipeline
    if record.pr is not None:
        lines += _publish_to_pr(api, env, config, record, report, file_digest(ledger), cancelled)
    else:
        lines += _record_main_ledger(api, env, ledger)
    click.echo("\n".join(lines))


def _job_links(api, run_id: int | None) -> tuple[dict[str, str], list[str]]:
    """(stage -> its job's page: the full log; what to say): a stage job is named after its
    stage, so the jobs of the stage run link each stage's log. Without a run id (not in Actions)
    or when GitHub will not say, the report links nothing."""
    from stagebot.bot.github import GitHubError

    if run_id is None:
        return {}, []
    try:
        return api.job_urls(run_id), []
    except GitHubError as error:
        return {}, [f"warning: the stage jobs' log links are left out ({error})"]


def _main_ledger(api, path: Path | None):
    """(main's ledger opened read-only, or None; what to say): used only when the bot recorded
    its digest (bot/main_ledger.py), else failures are compared within the PR's own ledger."""
    from stagebot.bot.ledger_files import unvouched_reason
    from stagebot.bot.main_ledger import RECORDED_WHERE, recorded_digests
    from stagebot.harness.ledger import Ledger

    if path is None or not path.exists():
        return None, []
    why = unvouched_reason(path, lambda: recorded_digests(lambda: api, path), RECORDED_WHERE)
    if why is not None:
        return None, [
            f"warning: main's ledger {path} is not one the bot saved ({why}); failures are "
            "compared within this PR's ledger"
        ]
    return Ledger.open(path, readonly=True), []


def _record_main_ledger(api, env, ledger: Path) -> list[str]:
    """Post-merge: record the saved ledger's digest as the stagebot/ledger status of the commit
    the next pipeline will look at (main_ledger.vouching_commit) before it uses the ledger."""
    from stagebot.bot.ledger_files import file_digest
    from stagebot.bot.main_ledger import LEDGER_STATUS, status_description, vouching_commit

    commit = vouching_commit(ledger)
    if commit is None:
        return ["no pull request, and no commit to vouch for the ledger: its digest is unrecorded"]
    digest = file_digest(ledger)
    description = status_description(digest, env.run_id)
    api.set_status(commit, "success", LEDGER_STATUS, description, None)
    return [
        "no pull request: nothing to reply to (post-merge history recorded; its sha256 is the "
        f"{LEDGER_STATUS} status of {commit[:7]})"
    ]


class ArtifactMismatch(StagebotError):
    """The plan artifact is not what the plan job left (replaced between the jobs)."""

    exit_code = 3


def _check_artifact(expected: str, plan_path: Path | None, ledger: Path) -> None:
    from stagebot.bot.ledger_files import artifact_digest, artifact_files

    if plan_path is None:
        raise click.UsageError("--artifact-digest needs --plan (the digest covers plan.json)")
    actual = artifact_digest(artifact_files(plan_path, ledger))
    if actual != expected:
        raise ArtifactMismatch(
            f"the plan artifact ({plan_path}, {ledger} and its side files) has digest "
            f"{actual[:16]}…, not the {expected[:16] or '(empty)'}… the plan job recorded: it "
            "was replaced or damaged after the plan job, so nothing is published and the "
            "status stays pending; comment /bot run again for a new pipeline"
        )


def default_branch(event_path: str | None, fallback: str = "main") -> str:
    """The repository's default branch from the event payload (``repository.default_branch``,
    in issue_comment and push payloads alike); ``fallback`` without a readable payload."""
    from stagebot.bot.events import EventError, load_payload

    if not event_path:
        return fallback
    try:
        branch = (load_payload(event_path).get("repository") or {}).get("default_branch")
    except (EventError, OSError, AttributeError):
        return fallback
    return branch if isinstance(branch, str) and branch else fallback


def _start_from_plan(book, number: int, plan_path: Path | None):
    if plan_path is None or not plan_path.exists():
        raise StagebotError(
            f"ledger {book.path} has no pipeline #{number} and no plan.json was given; "
            "give --plan (from `bot handle-event --out`) or the plan job's ledger"
        )
    plan = json.loads(plan_path.read_text())
    book.start_pipeline(
        command=plan["command"],
        commit=plan.get("commit"),
        plan=plan,
        pr=plan.get("pr"),
        number=number,
    )
    return book.pipeline(number, with_results=False)


def _record_results(
    book, number: int, plan: dict[str, Any], folder: Path, cancelled: bool, unreadable: dict
) -> list[str]:
    """Record each planned shard's result; return the result files that were ignored.

    A result is accepted only as ``<folder>/<planned stage>/result.json``, schema-valid, naming
    the stage and shard of its folder: the files come from stage jobs, which run PR code, so any
    other file (an extra stage, a second copy at another depth, a file claiming another
    shard) is ignored and named in the report, never merged in."""
    from stagebot.harness.streams import read_stream

    shards = [s for s in plan.get("shards", []) if s["action"] == "run"]
    accepted = {folder / shard["stage"] / "result.json" for shard in shards}
    ignored = [
        f"{path.relative_to(folder)} (not the result.json of a planned shard)"
        for path in (sorted(folder.rglob("result.json")) if folder.exists() else [])
        if path not in accepted
    ]
    for shard in plan.get("shards", []):
        stage, source = shard["stage"], shard.get("reuse_from")
        if shard["action"] == "skip":
            continue
        if shard["action"] == "reuse":
            result = _placeholder(shard, "REUSED", f"passed in #{source}; not re-run", source)
            book.record_result(number, result, reused_tests=_passed(book, source, stage))
            continue
        path = folder / stage / "result.json"
        result, logs = None, {}
        if path.exists():
            try:
                result = _read_result(path, shard)
                jsonl = path.with_name("tests.jsonl")
                if jsonl.exists():
                    stream = read_stream(jsonl)
                    logs = {t: r["log"] for t, r in stream.results.items() if r.get("log")}
            except (ValueError, StagebotError, OSError) as error:
                # one damaged file (truncated, not UTF-8, not schema-valid) costs only its shard
                why = f"result.json unreadable: {_one_line(error)} ({path.relative_to(folder)})"
                result, logs = _placeholder(shard, "ERROR", why), {}
        if result is None and stage in unreadable:
            result = _placeholder(shard, "ERROR", unreadable[stage])
        if result is None:
            result = (
                _placeholder(shard, "ABORTED", "cancelled before this stage finished")
                if cancelled
                else _placeholder(
                    shard,
                    "ERROR",
                    "the stage job left no result.json (it failed before writing one or its "
                    "runner was lost); see the workflow run's log",
                )
            )
        reused = _passed(book, source, stage) if shard.get("reused_tests") else None
        book.record_result(number, result, logs=logs, reused_tests=reused)
    return ignored


def _read_result(path: Path, shard: dict[str, Any]):
    """The StageResult at ``path``, which must be the planned ``shard``'s own."""
    from stagebot.harness.results import ResultError, StageResult

    result = StageResult.from_json(json.loads(path.read_text(encoding="utf-8")))
    claimed = (result.stage, result.shard, result.shards)
    planned = (shard["stage"], shard["shard"], shard["shards"])
    if claimed != planned:
        raise ResultError(
            f"it claims stage {claimed[0]!r} shard {claimed[1]}/{claimed[2]}, but its folder "
            f"is planned shard {planned[0]!r} {planned[1]}/{planned[2]}"
        )
    return result


def _one_line(error: Exception) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= 300 else text[:299] + "…"


def _passed(book, source: int | None, stage: str) -> dict[str, tuple[int, float]]:
    return book.passed_tests(source, stage) if source is not None else {}


def _placeholder(shard: dict[str, Any], state: str, evidence: str, source: int | None = None):
    from stagebot.harness.results import StageResult

    return StageResult(
        stage=shard["stage"],
        shard=shard["shard"],
        shards=shard["shards"],
        state=state,
        started_at=None,
        finished_at=None,
        duration_s=0.0,
        gpu_type=shard["gpu_type"],
        gpus=[],
        evidence=evidence,
        reused_from=source,
    )


def _publish_to_pr(
    api, env, config, record, report, ledger_digest: str, cancelled: bool
) -> list[str]:
    """Edit the pipeline's reply into the report and set the status; nothing when the reply
    says ABORTED (a /bot kill or a newer /bot run) and this run was not cancelled: a stage run
    that went on after its pipeline was stopped never turns the reply into a result."""
    from stagebot.bot.marker import ReplyMarker
    from stagebot.bot.replies import our_replies, reply_for_pipeline, with_ledger_digest
    from stagebot.harness.report import COMMENT_LIMIT, render_report, reply_completed

    lines = []
    replies = our_replies(api.comments(record.pr), config.bot_login)
    existing = reply_for_pipeline(replies, record.number)
    if existing is not None and existing.marker.state == "ABORTED" and not cancelled:
        return [
            f"reply {existing.comment.id} says pipeline #{record.number} was killed or "
            "superseded while its stage run went on: nothing is published over it"
        ]
    marker = ReplyMarker(
        pipeline=record.number,
        commit=record.commit or "unknown",
        comment_id=existing.marker.comment_id if existing else 0,
        state=report.state,
        stages={r.stage: r.state for r in report.results},
    )
    head = reply_completed(report).rstrip() + "\n\n"
    # the ledger's digest: handle-event accepts the next restored ledger only if it matches
    tail = "\n\n" + with_ledger_digest(marker.render(), ledger_digest, env.run_id) + "\n"
    body_md = render_report(report, "md", limit=COMMENT_LIMIT - len(head) - len(tail)).rstrip()
    body = head + body_md + tail
    if existing is not None:
        api.edit_comment(existing.comment.id, body)
        lines.append(f"edited reply {existing.comment.id} into the report")
    else:

        def landed():
            again = reply_for_pipeline(
                our_replies(api.comments(record.pr), config.bot_login), record.number
            )
            return again.comment if again else None

        comment = api.create_comment(record.pr, body, recover=landed)
        lines.append(f"posted the report as reply {comment.id} (no trigger reply was found)")
    lines.append(_set_status(api, env, config, record, report))
    return lines


def _set_status(api, env, config, record, report) -> str:
    """Set the status the report decided (``Report.status``: the reply says the same) unless a
    newer pipeline (or a skip / reuse) owns it. Statuses are append-only and GitHub has no
    conditional write, so after writing, the statuses are read again: one that landed between
    our read and our write, from a newer pipeline or a person's skip / reuse, is posted again
    on top (two report jobs of one PR can interleave)."""
    context = config.status_context
    decision = report.status
    if decision.state is None:
        return f"status {context!r} left alone: Partly Tested"
    if not record.commit:
        return "status left alone: no pinned commit"
    own = f"PR_Github #{record.number} "
    before = api.statuses(record.commit, context)
    if before and own not in before[0].description + " ":
        return (
            f"status {context!r} left alone: its newest value ({before[0].description!r}) "
            "belongs to another pipeline"
        )
    state = decision.state
    api.set_status(record.commit, state, context, decision.description, env.run_url)
    line = f"status {context!r} set to {state} on {record.commit[:7]}"
    after = api.statuses(record.commit, context)
    between = after[1 : len(after) - len(before)] if after and own in after[0].description else []
    newer = next((s for s in between if _outranks(s.description, record.number)), None)
    if newer is not None:
        api.set_status(record.commit, newer.state, context, newer.description, newer.target_url)
        line += f", then restored {newer.description!r}, which landed in between"
    return line


PIPELINE_IN_STATUS = re.compile(r"^PR_Github #(?P<number>[0-9]+) ")


def _outranks(description: str, number: int) -> bool:
    """Whether a status must not be overwritten by pipeline ``number``'s: a newer pipeline's
    (``PR_Github #N …``, N > number) or a person's skip / reuse (no pipeline prefix)."""
    match = PIPELINE_IN_STATUS.match(description)
    return match is None or int(match["number"]) > number
