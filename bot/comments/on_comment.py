"""What the bot does with one PR comment: dedupe, parse, authorize, reply, react, plan, status.

Order (each step can end the handling; every ending is a handled event):
1. ignore what is not for the bot (events.ignore_reason): no write at all;
2. dedupe: our reply's marker already names this comment id -> no write;
3. parse: malformed -> one reply (error + help) and a "confused" reaction;
4. authorize (authz, sha_pin): refused -> one reply saying what is missing, nothing runs;
5. accepted -> an "eyes" reaction, then the command (bot/comments/commands.py).

A user's mistake found only while planning (an unknown stage, a pipeline the ledger lacks) is a
malformed command too. Stagebot's own failures (its catalog, its ledger, its setup) are not the
user's: the reply says stagebot failed, and the error ends the job (its exit code) so that the
workflow run shows it. GitHub failing ends the job without a reply (there is no way to post one).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from stagebot.bot.comments import commands
from stagebot.bot.comments.authz import authorize
from stagebot.bot.comments.events import CommentEvent, ignore_reason
from stagebot.bot.comments.grammar import help_text, parse_comment
from stagebot.bot.comments.outcome import Outcome
from stagebot.bot.comments.rate_limit import rate_limited
from stagebot.bot.comments.replies import (
    NO_RUN_STATE,
    Reply,
    ledger_digests,
    next_pipeline,
    our_replies,
    reply_to,
)
from stagebot.bot.comments.session import Replier, Session
from stagebot.bot.comments.sha_pin import check_sha
from stagebot.bot.config import BotConfig
from stagebot.bot.custody.trust import RestoredLedger
from stagebot.bot.github import ActionsEnv, GitHubApi, GitHubError
from stagebot.harness.ledger.store import UnknownPipelineError
from stagebot.stages.errors import CommandError, PlanError, StagebotError

log = logging.getLogger("stagebot.bot")

# The commenter's own mistakes: answered as a malformed command. Any other StagebotError is
# stagebot's (a bad catalog, an unusable ledger, a missing setting).
USER_ERRORS = (CommandError, PlanError, UnknownPipelineError)

COMMANDS = {
    "run": commands.run,
    "kill": commands.kill,
    "skip": commands.skip,
    "reuse-pipeline": commands.reuse_pipeline,
}


@dataclass(frozen=True)
class CommentHandler:
    env: ActionsEnv
    config: BotConfig
    event: CommentEvent
    connect: Callable[[], GitHubApi]
    catalog_path: Path | None = None
    ledger_path: Path | None = None  # the ledger restored from the PR's previous pipeline

    def handle(self) -> Outcome:
        reason = ignore_reason(self.event, self.config.bot_login)
        if reason is not None:
            return Outcome(f"no-op: {reason}")
        api = self.connect()
        comments = api.comments(self.event.number)
        replies = our_replies(comments, self.config.bot_login)
        earlier = reply_to(replies, self.event.comment_id)
        if earlier is not None and not self._unfinished(earlier):
            return Outcome(
                f"no-op: comment {self.event.comment_id} was already handled "
                f"(reply {earlier.comment.id}, pipeline #{earlier.marker.pipeline})"
            )
        limited = rate_limited(self.event, comments, replies, self.config.rate_limit)
        if earlier is None and limited:  # a resumed one counted already
            return Outcome(
                f"no-op: @{self.event.author} reached the limit of {self.config.rate_limit} "
                "answered /bot comments on this PR per hour"
            )
        ledger = RestoredLedger(self.ledger_path, trusted=lambda: ledger_digests(replies))
        session = Session(
            env=self.env,
            config=self.config,
            event=self.event,
            api=api,
            pull=api.pull(self.event.number),
            pipeline=self.env.run_number or next_pipeline(replies),
            ledger=ledger,
            # a re-run of this workflow run's plan job edits the reply its failed attempt posted
            replier=Replier(api, self.config.bot_login, replies, resuming=earlier),
            catalog_path=self.catalog_path,
        )
        try:
            return replace(_answer(session), notice=ledger.notice)
        finally:
            ledger.close()

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


def _answer(session: Session) -> Outcome:
    """Parse, authorize and run the comment's command (steps 3 to 5)."""
    event, api = session.event, session.api
    try:
        command = parse_comment(event.body)
    except CommandError as error:
        return session.malformed(str(error), with_help=True)
    assert command.name is not None  # ignore_reason filtered comments without /bot
    if command.name == "help":
        api.react(event.comment_id, "eyes")
        session.reply("help", NO_RUN_STATE, help=help_text())
        return Outcome("answered /bot help", pipeline=session.pipeline)
    permission = api.permission(event.author)
    decision = authorize(command.name, event.author, permission, session.config, event.author_id)
    if not decision.allowed:
        return session.refused(command, decision)
    pinned = check_sha(session, command, permission)
    if not pinned.allowed:
        return session.refused(command, pinned, sha_refused=True)
    try:
        return COMMANDS[command.name](session, command)
    except USER_ERRORS as error:
        return session.malformed(str(error), with_help=False)
    except GitHubError:
        raise
    except StagebotError as error:
        try:
            session.failed(command, error)
        except Exception as unreplied:  # noqa: BLE001 - the log must show the first failure
            log.warning("could not reply that stagebot failed: %s", unreplied)
        raise
