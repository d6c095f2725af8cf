"""What the bot does with one PR comment: dedupe, parse, authorize, reply, react, plan, status.

Order (each step can end the handling; every ending is a handled event):
1. ignore what is not for the bot (events.ignore_reason): no write at all;
2. dedupe: our reply's marker already names this comment id -> no write;
3. parse: malformed -> one reply (error + help) and a "confused" reaction;
4. authorize (authz): refused -> one reply saying what is missing, nothing runs;
5. accepted -> an "eyes" reaction, then the command: run / kill / skip / reuse-pipeline / help.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stagebot.bot.authz import Decision, approve, authorize
from stagebot.bot.config import BotConfig
from stagebot.bot.events import CommentEvent, ignore_reason
from stagebot.bot.github import (
    ActionsEnv,
    Comment,
    GitHubApi,
    Permission,
    PullRequest,
    TimelineEvent,
)
from stagebot.bot.grammar import help_text, parse_comment
from stagebot.bot.marker import ReplyMarker
from stagebot.bot.replies import (
    NO_RUN_STATE,
    Reply,
    ledger_digests,
    next_pipeline,
    our_replies,
    render_reply,
    reply_to,
    running,
)
from stagebot.stages.command import Command, render
from stagebot.stages.errors import CommandError, StagebotError
from stagebot.templates.markdown import Trusted, escape

if TYPE_CHECKING:
    from stagebot.harness.ledger import Ledger

log = logging.getLogger("stagebot.bot")
PULL_COMMITS_LISTED = 250  # GitHub lists at most this many commits of a pull request


@dataclass
class Outcome:
    """What handle-event tells the workflow (GITHUB_OUTPUT) and prints."""

    reason: str
    run: bool = False
    matrix: list[dict[str, Any]] = field(default_factory=list)
    pipeline: int | None = None
    commit: str | None = None
    pr: int | None = None
    reply_id: int | None = None
    plan: dict[str, Any] | None = None

    def outputs(self) -> dict[str, str]:
        import json

        return {
            "run": "true" if self.run else "false",
            "matrix": json.dumps(self.matrix, separators=(",", ":")),
            "pipeline": str(self.pipeline or ""),
            "commit": self.commit or "",
            "pr": str(self.pr or ""),
            "reply_id": str(self.reply_id or ""),
        }


class LedgerSource:
    """The ledger carried from the PR's previous pipeline, opened only when a step needs it (an
    event that is not for the bot never touches it). A ledger that cannot be opened (corrupt,
    unreadable, another schema) is moved aside (``<name>.rejected-<time>``) and replaced by an
    empty one: the pipeline starts without history rather than the PR being stuck; ``notice``
    says so, and the bot's reply carries it."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.notice: str | None = None
        # the digests the bot recorded for this ledger; None: not checked
        self.trusted: Callable[[], set[str]] | None = None
        self.recorded_where = "the bot's replies on this PR"  # what ``trusted`` reads
        self._book: Ledger | None = None
        self._checked = False

    def get(self) -> Ledger | None:
        if self.path is not None and self._book is None:
            self._book = self._open(self.path)
        return self._book

    def digest(self) -> str | None:
        """Close the ledger (when a step opened it) and return its file's sha256, the value
        the bot records in its reply; None when no step used the ledger."""
        from stagebot.bot.ledger_files import file_digest

        if self._book is None or self.path is None:
            return None
        self.close()
        return file_digest(self.path)

    def close(self) -> None:
        """Close the ledger if a step opened it: its file then holds every change (no WAL)."""
        if self._book is not None:
            self._book.close()
            self._book = None

    def _open(self, path: Path) -> Ledger:
        from stagebot.bot.ledger_files import unvouched_reason
        from stagebot.harness.ledger import Ledger, LedgerError

        path.parent.mkdir(parents=True, exist_ok=True)
        if not self._checked and self.trusted is not None and path.exists():
            self._checked = True
            why = unvouched_reason(path, self.trusted, self.recorded_where)
            if why is not None:
                aside = self.move_aside(path)
                self.notice = (
                    "The pipeline ledger handed to this job is not one the bot saved "
                    f"({why}); it was moved aside to {aside.name} and this pipeline starts "
                    "from an empty history (nothing is reused)."
                )
                return Ledger.open(path)
        self._checked = True
        try:
            return Ledger.open(path)
        except LedgerError as error:
            aside = self.move_aside(path)
            self.notice = (
                f"The pipeline ledger restored from the previous pipeline could not be used "
                f"({error}); it was moved aside to {aside.name} and this pipeline starts from "
                "an empty history (nothing is reused)."
            )
        return Ledger.open(path)

    @staticmethod
    def move_aside(path: Path) -> Path:
        from datetime import UTC, datetime

        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        aside = path.with_name(f"{path.name}.rejected-{stamp}")
        for suffix in ("", "-wal", "-shm", "-journal"):
            part = path.with_name(path.name + suffix)
            if part.exists():
                part.rename(aside.with_name(aside.name + suffix))
        return aside


def rate_limited(
    event: CommentEvent, comments: list[Comment], replies: list[Reply], limit: int
) -> bool:
    """Whether the commenter already had ``limit`` /bot comments on this PR answered (one of
    ``replies`` names them) in the hour before this one (GitHub's timestamps; one reply and at
    most one pipeline per comment). Bounds the replies, API calls and pipelines one person can
    cause."""
    from datetime import datetime, timedelta

    def when(stamp: str) -> datetime | None:
        try:
            return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        except ValueError:
            return None

    now = when(event.created_at)
    if now is None:
        return False
    theirs = {c.id: when(c.created_at) for c in comments if c.author == event.author}
    answered = sum(
        1
        for reply in replies
        if (at := theirs.get(reply.marker.comment_id)) is not None
        and now - timedelta(hours=1) <= at <= now
    )
    return answered >= limit


@dataclass
class CommentHandler:
    env: ActionsEnv
    config: BotConfig
    event: CommentEvent
    connect: Callable[[], GitHubApi]
    catalog_path: Path | None = None
    ledger_source: LedgerSource = field(default_factory=lambda: LedgerSource(None))
    api: GitHubApi = field(init=False)
    replies: list[Reply] = field(init=False, default_factory=list)
    pipeline: int = field(init=False, default=0)
    pull: PullRequest = field(init=False)
    resuming: Reply | None = field(init=False, default=None)

    @property
    def ledger(self) -> Ledger | None:
        return self.ledger_source.get()

    def handle(self) -> Outcome:
        reason = ignore_reason(self.event, self.config.bot_login)
        if reason is not None:
            return Outcome(f"no-op: {reason}")
        self.api = self.connect()
        number = self.event.number
        comments = self.api.comments(number)
        self.replies = our_replies(comments, self.config.bot_login)
        self.ledger_source.trusted = lambda: ledger_digests(self.replies)
        earlier = reply_to(self.replies, self.event.comment_id)
        if earlier is not None and not self._unfinished(earlier):
            return Outcome(
                f"no-op: comment {self.event.comment_id} was already handled "
                f"(reply {earlier.comment.id}, pipeline #{earlier.marker.pipeline})"
            )
        limited = rate_limited(self.event, comments, self.replies, self.config.rate_limit)
        if earlier is None and limited:  # a resumed one counted already
            return Outcome(
                f"no-op: @{self.event.author} reached the limit of {self.config.rate_limit} "
                "answered /bot comments on this PR per hour"
            )
        self.resuming = earlier  # a re-run of this workflow run's plan job: finish the pipeline
        self.pipeline = self.env.run_number or next_pipeline(self.replies)
        self.pull = self.api.pull(number)
        try:
            command = parse_comment(self.event.body)
        except CommandError as error:
            return self._malformed(str(error), with_help=True)
        assert command.name is not None  # ignore_reason filtered comments without /bot
        if command.name == "help":
            self.api.react(self.event.comment_id, "eyes")
            self._reply("help", NO_RUN_STATE, help=help_text())
            return Outcome("answered /bot help", pipeline=self.pipeline)
        permission = self.api.permission(self.event.author)
        decision = authorize(
            command.name, self.event.author, permission, self.config, self.event.author_id
        )
        if not decision.allowed:
            return self._refuse(command, decision)
        pinned = self._check_sha(command, permission)
        if not pinned.allowed:
            return self._refuse(command, pinned, sha_refused=True)
        handler = {
            "run": self._run,
            "kill": self._kill,
            "skip": self._skip,
            "reuse-pipeline": self._reuse_pipeline,
        }[command.name]
        return handler(command)

    def _unfinished(self, earlier: Reply) -> bool:
        """Our reply to this comment says RUNNING for this very workflow run, and this is a
        re-run attempt: the plan job posted the reply, then failed (e.g. the status write kept
        failing). A second delivery of the event is a new run, and stays a no-op."""
        return (
            earlier.marker.state == "RUNNING"
            and self.env.run_attempt > 1
            and self.env.run_number is not None
            and earlier.marker.pipeline == self.env.run_number
        )

    # ---- commands
    def _run(self, command: Command) -> Outcome:
        from stagebot.stages.catalog import load_catalog
        from stagebot.stages.matrix import matrix_entries
        from stagebot.stages.planner import plan_run

        commit = self.pull.head_sha  # pinned now: later pushes do not change this pipeline
        changed = self.api.changed_files(self.pull.number)
        try:
            reuse_from = command.run.reuse_test if command.run else None
            if isinstance(reuse_from, int) and self.ledger is not None:
                self.ledger.require_pipeline(reuse_from)
            catalog = load_catalog(self.catalog_path)
            plan = plan_run(
                command,
                catalog,
                changed_files=changed,
                commit=commit,
                pr=self.pull.number,
                history=self.ledger,
            )
        except StagebotError as error:
            return self._malformed(str(error), with_help=False)
        approval = approve(
            plan.needs_approval,
            plan.approval_reasons,
            self.pull.labels,
            self.config,
            head=commit,
            timeline=lambda: self._timeline,
            is_approver=self._is_approver,
            reply_commits={r.comment.id: r.marker.commit for r in self.replies},
        )
        if not approval.allowed:
            return self._refuse(command, approval, label_missing=True)
        self.api.react(self.event.comment_id, "eyes")
        cancelled = self._stop_running(f"Superseded by PR_Github #{self.pipeline}.")
        entries = [entry.to_json() for entry in matrix_entries(plan, catalog, self.pipeline)]
        recorded = self.ledger.pipeline(self.pipeline, with_results=False) if self.ledger else None
        if self.ledger is not None and recorded is None:  # a re-run may find it recorded
            self.ledger.start_pipeline(
                command=command.to_json(),
                commit=commit,
                plan=plan.to_json(),
                pr=self.pull.number,
                base_commit=self.pull.base_sha,
                number=self.pipeline,
                meta={"stage_paths": catalog.suspect_patterns([s.stage for s in plan.shards])},
            )
        counts = {action: len(plan.shards_to(action)) for action in ("run", "reuse", "skip")}
        stages = {s.stage: "PENDING" for s in plan.shards_to("run")}
        stages |= {s.stage: "REUSED" for s in plan.shards_to("reuse")}
        reply = self._reply(
            "triggered",
            "RUNNING",
            stages=stages,
            command=render(command),
            commit=commit,
            cancelled=cancelled,
            counts=counts,
            partly_tested_reason=None if plan.gating else plan.partly_tested_reason,
        )
        if plan.gating:
            self.api.set_status(
                commit,
                "pending",
                self.config.status_context,
                f"PR_Github #{self.pipeline} is running on {commit[:7]}",
                self.env.run_url,
            )
        return Outcome(
            f"pipeline #{self.pipeline}: {counts['run']} shard(s) to run on {commit[:7]}",
            run=True,
            matrix=entries,
            pipeline=self.pipeline,
            commit=commit,
            pr=self.pull.number,
            reply_id=reply.id,
            plan=plan.to_json(),
        )

    def _kill(self, command: Command) -> Outcome:
        self.api.react(self.event.comment_id, "eyes")
        killed = self._stop_running(f"Killed by @{self.event.author} (/bot kill).")
        self._reply("killed", NO_RUN_STATE, killed=killed)
        return Outcome(
            f"killed {len(killed)} pipeline(s)" if killed else "kill: nothing was running",
            pipeline=self.pipeline,
        )

    def _skip(self, command: Command) -> Outcome:
        assert command.comment is not None
        self.api.react(self.event.comment_id, "eyes")
        sha = self.pull.head_sha
        self.api.set_status(
            sha,
            "success",
            self.config.status_context,
            f"Skipped by @{self.event.author}: {command.comment}",
            self.env.run_url,
        )
        self._reply("skipped", "SUCCESS", reason=command.comment)
        return Outcome(f"skip: {sha[:7]} marked success without testing", pipeline=self.pipeline)

    def _reuse_pipeline(self, command: Command) -> Outcome:
        """Validate the head commit with pipeline N (the ledger decides whether N may), stop
        the PR's running pipelines, and set the gating status from N."""
        if self.ledger is None:
            raise StagebotError(
                "reuse-pipeline needs the pipeline ledger: give handle-event --ledger PATH"
            )
        self.api.react(self.event.comment_id, "eyes")
        head = self.pull.head_sha
        validation = self.ledger.record_validation(
            head, command.pipeline_id, pr=self.pull.number, number=self.pipeline
        )
        if not validation.ok:
            self._reply("reused", NO_RUN_STATE, ok=False, why=validation.reason, source=None)
            return Outcome(f"reuse-pipeline refused: {validation.reason}", pipeline=self.pipeline)
        stopped = self._stop_running(f"Replaced by reusing PR_Github #{validation.source}.")
        changed: list[str] | None = None
        if validation.source_commit and validation.source_commit != head:
            changed = self.api.compare_files(validation.source_commit, head)
        self.api.set_status(
            head,
            "success",
            self.config.status_context,
            f"Validated by PR_Github #{validation.source} (reuse-pipeline by @{self.event.author})",
            self.env.run_url,
        )
        self._reply(
            "reused",
            "SUCCESS",
            ok=True,
            why=validation.reason,
            source=validation.source,
            source_sha7=(validation.source_commit or head)[:7],
            changed=changed,
            stopped=stopped,
        )
        return Outcome(
            f"reuse-pipeline: {head[:7]} validated by #{validation.source}", pipeline=self.pipeline
        )

    # ---- shared steps
    def _check_sha(self, command: Command, permission: Permission) -> Decision:
        """The command applies only to the commit its author named (--sha, 12 to 40 hex
        digits): skip and reuse-pipeline always need it, run on PRs whose author lacks write
        permission. A prefix can be ground to match a second commit, so it must begin the head's
        SHA and no other listed commit of the PR, the head must be among the listed commits and
        the list complete (GitHub lists at most 250), and the timeline must show no push
        (``committed``) and no force-push after the comment (GitHub's order, no timestamps)."""
        head, sha = self.pull.head_sha, command.sha
        again = f"review it and comment again with `--sha {head}`"
        if sha is None:
            if command.name in ("skip", "reuse-pipeline"):
                return Decision(
                    False,
                    f"`/bot {command.name}` needs --sha naming the commit you reviewed; the "
                    f"PR's head is {head} (after reviewing it: `--sha {head}`)",
                )
            if command.name == "run":
                author = (
                    permission
                    if self.pull.author == self.event.author
                    else self.api.permission(self.pull.author)
                )
                if not author.at_least("write"):
                    return Decision(
                        False,
                        f"the PR's author @{escape(self.pull.author)} lacks write permission, "
                        f"so `/bot run` needs --sha naming the commit you reviewed; the head "
                        f"is {head} (after reviewing it: `--sha {head}`)",
                    )
            return Decision(True, "no --sha needed")
        if not head.startswith(sha):
            return Decision(
                False,
                f"--sha {sha} is not the PR's head {head} (it moved since, or the SHA is "
                f"mistyped); {again}",
            )
        commits = self.api.pull_commits(self.pull.number)
        if len(commits) >= PULL_COMMITS_LISTED or head not in commits:
            return Decision(
                False,
                f"the PR's commit list is incomplete ({len(commits)} listed; GitHub lists at "
                f"most {PULL_COMMITS_LISTED}) or lacks the head {head}, so --sha {sha} cannot be "
                "checked against a commit ground to match it; give the full SHA of a PR with "
                "fewer commits (squash it)",
            )
        matching = [c for c in commits if c.startswith(sha)]
        if len(matching) > 1:
            return Decision(
                False,
                f"--sha {sha} is ambiguous: {len(matching)} commits of this PR begin with it "
                f"({', '.join(matching)}); give the full SHA `--sha {head}`",
            )
        since: list[TimelineEvent] | None = None  # the timeline after the comment
        for index, event in enumerate(self._timeline):
            if event.kind == "commented" and event.comment_id == self.event.comment_id:
                since = self._timeline[index + 1 :]
        moved = [e for e in since or [] if e.kind in ("committed", "head_ref_force_pushed")]
        if since is None or moved:
            return Decision(
                False,
                f"the PR's head moved after your comment (a push or a force-push; or the "
                f"comment is not on its timeline), so --sha {sha} may name a commit made to "
                f"match it; the head is {head}: {again}",
            )
        return Decision(True, f"--sha {sha} is the head {head}")

    @functools.cached_property
    def _timeline(self) -> list[TimelineEvent]:
        return self.api.timeline(self.pull.number)

    def _is_approver(self, event: TimelineEvent) -> bool:
        if event.actor_id is not None and event.actor_id in self.config.approvers:
            return True
        return event.actor is not None and self.api.permission(event.actor).at_least("maintain")

    def _stop_running(self, why: str) -> list[int]:
        """Cancel this PR's other running pipelines and mark them ABORTED (reply and ledger).
        The stage run cancelled is the one `bot dispatch` recorded in the reply's marker, never
        one found by its title (anyone's workflow run can carry any title)."""
        stopped = []
        for reply in running(self.replies, self.pipeline):
            number = reply.marker.pipeline
            reason = why
            run_id = reply.marker.stage_run  # only the run the bot's dispatch recorded
            if run_id is not None and not self.api.cancel_run(run_id):
                reason += " " + self._unreported(run_id)
            marker = replace(reply.marker, state="ABORTED")
            self.api.edit_comment(
                reply.comment.id,
                render_reply(
                    "aborted", marker, pipeline=number, sha7=marker.commit[:7], why=reason
                ),
            )
            if self.ledger is not None:
                record = self.ledger.pipeline(number, with_results=False)
                if record is not None and record.state == "RUNNING":
                    self.ledger.finish_pipeline(number, "ABORTED", meta={"aborted": reason})
            stopped.append(number)
        return stopped

    def _unreported(self, run_id: int) -> str:
        """What to say of a pipeline whose stage run had already finished while its reply still
        said RUNNING: no report run published it. Without the GitHub App the plan job dispatches
        with GITHUB_TOKEN, and whether GitHub then starts report.yml (workflow_run) for the
        finished run is not documented (docs/github.md "The bot's GitHub App")."""
        run = self.api.workflow_run(run_id)
        log.warning("stage run %s finished (%s) but no report published it", run_id, run.conclusion)
        return (
            f"Its stage run {run_id} had already finished ({run.conclusion or 'no conclusion'}), "
            "but no report run had published it: report.yml did not run for it (GitHub may "
            "start no `workflow_run` run for a stage run dispatched with the GITHUB_TOKEN; set "
            "up the bot's GitHub App), or its report job failed."
        )

    def _malformed(self, error: str, *, with_help: bool) -> Outcome:
        self.api.react(self.event.comment_id, "confused")
        # the parse error can quote the comment: the template escapes it like any user text
        self._reply(
            "malformed",
            NO_RUN_STATE,
            error=error.split("\n\n", 1)[0],
            help=help_text() if with_help else "",
        )
        return Outcome(f"malformed command: {error.splitlines()[0]}", pipeline=self.pipeline)

    def _refuse(
        self, command: Command, decision: Decision, label_missing=False, sha_refused=False
    ) -> Outcome:
        self._reply(
            "refused",
            NO_RUN_STATE,
            command=render(command),
            why=Trusted(decision.why),  # authz escapes the user-controlled parts
            label_missing=label_missing,
            sha_refused=sha_refused,
        )
        return Outcome(f"refused: {decision.why}", pipeline=self.pipeline)

    def _reply(self, kind: str, state: str, stages: dict[str, str] | None = None, **context):
        """Post our one reply for this comment; after an ambiguous failure, adopt the reply
        that landed (found by its marker) instead of posting a second one."""
        marker = ReplyMarker(
            pipeline=self.pipeline,
            commit=self.pull.head_sha,
            comment_id=self.event.comment_id,
            state=state,
            stages=stages or {},
        )
        body = render_reply(
            kind,
            marker,
            pipeline=self.pipeline,
            sha7=self.pull.head_sha[:7],
            login=self.event.author,
            comment_url=self.event.html_url,
            run_url=self.env.run_url,
            status_context=self.config.status_context,
            notice=self.ledger_source.notice,
            ledger_digest=self.ledger_source.digest(),  # the ledger as this job saves it
            ledger_run=self.env.run_id,  # this run uploads it (bot.yml's last step)
            **context,
        )

        def landed() -> Comment | None:
            found = reply_to(
                our_replies(self.api.comments(self.pull.number), self.config.bot_login),
                self.event.comment_id,
            )
            return found.comment if found else None

        if self.resuming is not None:  # the reply a failed attempt posted: edit it in place
            comment = replace(self.resuming.comment, body=body)
            self.api.edit_comment(comment.id, body)
            self.replies.remove(self.resuming)
            self.resuming = None
        else:
            comment = self.api.create_comment(self.pull.number, body, recover=landed)
        self.replies.append(Reply(comment, marker))
        return comment
