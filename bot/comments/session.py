"""One handled PR comment's context, and the bot's one reply to it.

``Session`` is built whole, once the comment is known to be for the bot and not yet answered:
every step of the handling reads the same frozen facts (the API, the pull request pinned at
that moment, the pipeline number, the ledger). ``Replier`` owns the only state that changes:
the bot's replies on the PR, to which it adds its own when it posts it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path

from stagebot.bot.comments.authz import Decision
from stagebot.bot.comments.events import CommentEvent
from stagebot.bot.comments.grammar import help_text
from stagebot.bot.comments.outcome import Outcome
from stagebot.bot.comments.replies import NO_RUN_STATE, Reply, our_replies, render_reply, reply_to
from stagebot.bot.config import BotConfig
from stagebot.bot.custody.trust import RestoredLedger
from stagebot.bot.github import ActionsEnv, Comment, GitHubApi, PullRequest, TimelineEvent
from stagebot.bot.protocols.marker import ReplyMarker
from stagebot.stages.command import Command, render
from stagebot.templates.markdown import Trusted


class Replier:
    """Posts the bot's one reply to the comment: edits the reply a failed attempt of this run
    posted (``resuming``), else creates it; after an ambiguous failure, adopts the reply that
    landed (found by its marker) instead of posting a second one."""

    def __init__(
        self, api: GitHubApi, bot_login: str, replies: list[Reply], resuming: Reply | None
    ):
        self.api = api
        self.bot_login = bot_login
        self.replies = list(replies)
        self._resuming = resuming

    def post(self, number: int, comment_id: int, marker: ReplyMarker, body: str) -> Comment:
        def landed() -> Comment | None:
            found = reply_to(our_replies(self.api.comments(number), self.bot_login), comment_id)
            return found.comment if found else None

        if self._resuming is not None:
            comment = replace(self._resuming.comment, body=body)
            self.api.edit_comment(comment.id, body)
            self.replies.remove(self._resuming)
            self._resuming = None
        else:
            comment = self.api.create_comment(number, body, recover=landed)
        self.replies.append(Reply(comment, marker))
        return comment


@dataclass(frozen=True)
class Session:
    env: ActionsEnv
    config: BotConfig
    event: CommentEvent
    api: GitHubApi
    pull: PullRequest  # as it was when the comment was handled: its head is pinned
    pipeline: int  # the number this handling's pipeline (or reply) gets
    ledger: RestoredLedger
    replier: Replier
    catalog_path: Path | None = None

    @functools.cached_property
    def timeline(self) -> list[TimelineEvent]:
        return self.api.timeline(self.pull.number)

    def reply(
        self,
        kind: str,
        state: str,
        stages: dict[str, str] | None = None,
        *,
        vouch: bool = True,
        **context,
    ) -> Comment:
        """Post the reply ``kind`` (templates/reply_<kind>.md.j2). With ``vouch``, it records
        the digest of the ledger as this job saves it, when a step used the ledger."""
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
            notice=self.ledger.notice,
            ledger_digest=self.ledger.digest() if vouch else None,
            ledger_run=self.env.run_id,  # this run uploads it (bot.yml's last step)
            **context,
        )
        return self.replier.post(self.pull.number, self.event.comment_id, marker, body)

    def malformed(self, error: str, *, with_help: bool) -> Outcome:
        """The user's comment cannot be used: say why (and how to talk to the bot)."""
        self.api.react(self.event.comment_id, "confused")
        # the parse error can quote the comment: the template escapes it like any user text
        self.reply(
            "malformed",
            NO_RUN_STATE,
            error=error.split("\n\n", 1)[0],
            help=help_text() if with_help else "",
        )
        return Outcome(f"malformed command: {error.splitlines()[0]}", pipeline=self.pipeline)

    def refused(
        self, command: Command, decision: Decision, label_missing=False, sha_refused=False
    ) -> Outcome:
        self.reply(
            "refused",
            NO_RUN_STATE,
            command=render(command),
            why=Trusted(decision.why),  # authz escapes the user-controlled parts
            label_missing=label_missing,
            sha_refused=sha_refused,
        )
        return Outcome(f"refused: {decision.why}", pipeline=self.pipeline)

    def failed(self, command: Command, error: Exception) -> None:
        """Stagebot itself failed (its catalog, its ledger, its setup): say so honestly. The
        reply vouches for no ledger: what the failed step left in it is not known."""
        self.reply("failed", NO_RUN_STATE, vouch=False, command=render(command), error=str(error))
