"""`bot publish`: the Actions report job. Records the stage jobs' StageResults into the ledger,
renders the report, edits the pipeline's one reply into it and sets the gating status.

- Shards the plan reused are recorded REUSED (their passed tests copied from the source
  pipeline); shards whose job left no ``result.json`` are ABORTED when the run was cancelled
  (``--cancelled``), else ERROR with that as the evidence. A ``result.json`` that cannot be read
  (truncated, not UTF-8, not a StageResult) makes only its shard ERROR ("result.json unreadable:
  …", an infrastructure failure); the other shards' results are kept and the pipeline still ends.
- The reply is found by the id the plan job recorded, else by its marker's pipeline number; a
  missing reply is posted (once: the marker makes the post idempotent).
- The status is set only for gating plans, and only while the newest status of the context is
  this pipeline's own (a newer pipeline or a skip is never overwritten). SUCCESS -> success;
  FAILURE -> failure; ABORTED or shards that could not run -> error.
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
from pathlib import Path
from typing import Any

import click

from stagebot.bot.errors import StagebotError


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
    "--logs-url",
    default=None,
    metavar="URL",
    help="The workflow run whose stagebot-result-<stage> artifacts hold the shards' logs "
    "(default: this run).",
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
    logs_url=None,
):
    """Record StageResults, render the report, edit the reply, set the status."""
    from stagebot.bot.config import load_config
    from stagebot.bot.github import ActionsEnv, RetryPolicy, connect
    from stagebot.bot.ledger import Ledger
    from stagebot.bot.ledger_files import file_digest
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
    _record_results(book, number, plan, Path(results), cancelled)
    base = (base_book or book).base_pipeline(
        record.base_commit, default_branch(env.event_path), exclude=None if base_book else number
    )
    outcomes = (base_book or book).test_outcomes(base) if base is not None else None
    record = book.pipeline(number)
    report = report_from_record(record, base=outcomes, base_pipeline=base, cancelled=cancelled)
    report.logs_url = logs_url or env.run_url
    book.finish_pipeline(number, report.analysis.state, meta={"base_pipeline": base})
    report.state = report.analysis.state
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.md").write_text(render_report(report, "md"), encoding="utf-8")
        (out / "report.html").write_text(render_report(report, "html"), encoding="utf-8")
    lines.insert(0, f"pipeline #{number}: {report.state}")
    book.close()  # final: the bytes the report job saves for the PR's next pipeline
    if record.pr is not None:
        lines += _publish_to_pr(api, env, config, record, report, file_digest(ledger))
    else:
        lines += _record_main_ledger(api, ledger)
    click.echo("\n".join(lines))


def _main_ledger(api, path: Path | None):
    """(main's ledger opened read-only, or None; what to say): used only when the bot recorded
    its digest (bot/main_ledger.py), else failures are compared within the PR's own ledger."""
    from stagebot.bot.ledger import Ledger
    from stagebot.bot.ledger_files import unvouched_reason
    from stagebot.bot.main_ledger import RECORDED_WHERE, recorded_digests

    if path is None or not path.exists():
        return None, []
    why = unvouched_reason(path, lambda: recorded_digests(lambda: api, path), RECORDED_WHERE)
    if why is not None:
        return None, [
            f"warning: main's ledger {path} is not one the bot saved ({why}); failures are "
            "compared within this PR's ledger"
        ]
    return Ledger.open(path, readonly=True), []


def _record_main_ledger(api, ledger: Path) -> list[str]:
    """Post-merge: record the saved ledger's digest as the stagebot/ledger status of the commit
    the next pipeline will look at (main_ledger.vouching_commit) before it uses the ledger."""
    from stagebot.bot.ledger_files import file_digest
    from stagebot.bot.main_ledger import LEDGER_STATUS, status_description, vouching_commit

    commit = vouching_commit(ledger)
    if commit is None:
        return ["no pull request, and no commit to vouch for the ledger: its digest is unrecorded"]
    digest = file_digest(ledger)
    api.set_status(commit, "success", LEDGER_STATUS, status_description(digest), None)
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
    plan = json.loads(plan_path.read_text(encoding="utf-8"))
    book.start_pipeline(
        command=plan["command"],
        commit=plan.get("commit"),
        plan=plan,
        pr=plan.get("pr"),
        number=number,
    )
    return book.pipeline(number, with_results=False)


def _record_results(book, number: int, plan: dict[str, Any], folder: Path, cancelled: bool):
    from stagebot.harness.results import ResultError, StageResult
    from stagebot.harness.streams import read_stream

    planned = {shard["stage"] for shard in plan.get("shards", [])}
    found: dict[str, tuple[StageResult, dict[str, str]]] = {}
    unreadable: dict[str, str] = {}  # stage -> why its result.json could not be read
    strays: list[str] = []  # unreadable files in no planned stage's folder
    for path in sorted(folder.rglob("result.json")) if folder.exists() else []:
        try:
            result = StageResult.from_json(json.loads(path.read_text(encoding="utf-8")))
            logs = {}
            jsonl = path.with_name("tests.jsonl")
            if jsonl.exists():
                stream = read_stream(jsonl)
                logs = {t: r["log"] for t, r in stream.results.items() if r.get("log")}
        except (ValueError, ResultError, OSError) as error:
            # one damaged file (truncated, not UTF-8, an unknown key) costs only its shard
            why = f"result.json unreadable: {_one_line(error)} ({path.relative_to(folder)})"
            stage = next((p for p in reversed(path.parent.parts) if p in planned), None)
            if stage is None:
                strays.append(why)
            else:
                unreadable[stage] = why
            continue
        found[result.stage] = (result, logs)
    for shard in plan.get("shards", []):
        stage, source = shard["stage"], shard.get("reuse_from")
        if shard["action"] == "skip":
            continue
        if shard["action"] == "reuse":
            result = _placeholder(shard, "REUSED", f"passed in #{source}; not re-run", source)
            book.record_result(number, result, reused_tests=_passed(book, source, stage))
            continue
        result, logs = found.get(stage, (None, {}))
        if result is None and stage in unreadable:
            result = _placeholder(shard, "ERROR", unreadable[stage])
        elif result is None:
            result = (
                _placeholder(shard, "ABORTED", "cancelled before this stage finished")
                if cancelled
                else _placeholder(
                    shard,
                    "ERROR",
                    "the stage job left no result.json (it failed before writing one or its "
                    "runner was lost); see the workflow run's log"
                    + "".join(f"; also found {why}" for why in strays),
                )
            )
        reused = _passed(book, source, stage) if shard.get("reused_tests") else None
        book.record_result(number, result, logs=logs, reused_tests=reused)


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


def _publish_to_pr(api, env, config, record, report, ledger_digest: str) -> list[str]:
    from stagebot.bot.marker import ReplyMarker
    from stagebot.bot.replies import our_replies, reply_for_pipeline, with_ledger_digest
    from stagebot.harness.report import COMMENT_LIMIT, render_report, reply_completed

    lines = []
    replies = our_replies(api.comments(record.pr), config.bot_login)
    existing = reply_for_pipeline(replies, record.number)
    marker = ReplyMarker(
        pipeline=record.number,
        commit=record.commit or "unknown",
        comment_id=existing.marker.comment_id if existing else 0,
        state=report.state,
        stages={r.stage: r.state for r in report.results},
    )
    head = reply_completed(report).rstrip() + "\n\n"
    # the ledger's digest: handle-event accepts the next restored ledger only if it matches
    tail = "\n\n" + with_ledger_digest(marker.render(), ledger_digest) + "\n"
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
    context = config.status_context
    if not report.gating:
        return f"status {context!r} left alone: Partly Tested"
    if not record.commit:
        return "status left alone: no pinned commit"
    own = f"PR_Github #{record.number} "
    current = api.statuses(record.commit, context)
    if current and own not in current[0].description + " ":
        return (
            f"status {context!r} left alone: its newest value ({current[0].description!r}) "
            "belongs to another pipeline"
        )
    if report.state == "SUCCESS" and report.sets_status:
        state, text = "success", f"{own}passed on {record.commit[:7]}"
    elif report.state == "FAILURE":
        state, text = "failure", f"{own}failed: {report.headline()}"
    elif report.state == "ABORTED":
        state, text = "error", f"{own}was aborted before it finished"
    else:
        missing = len(report.analysis.not_run)
        state, text = "error", f"{own}could not run {missing} stage(s): not a pass"
    api.set_status(record.commit, state, context, text, env.run_url)
    return f"status {context!r} set to {state} on {record.commit[:7]}"
