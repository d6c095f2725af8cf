"""The pull request the bot's tests work on in the fake GitHub, and what the bot left on it."""

from __future__ import annotations

from dataclasses import replace

from github_server import FakeGitHub

from stagebot.bot.protocols.marker import find_marker, with_marker

PR = 7
SHA = "c0ffee" + "0" * 34  # the PR's head
BOT = "github-actions[bot]"  # the login the bot's replies are written as
COMMENT_ID = 1234567  # the comment delivered
ROLES = (  # the PR's collaborators: (login, role)
    ("writer", "write"),
    ("maintainer", "maintain"),
    ("boss", "admin"),
    ("triager", "triage"),
    ("reader", "read"),
    ("contributor", "write"),  # the PR's author: a collaborator (run needs no --sha)
)


def replies(gh: FakeGitHub) -> list[dict]:
    return gh.bot_comments(PR, BOT)


def marker_of(comment: dict):
    return find_marker(comment["body"])


def status(gh: FakeGitHub) -> dict | None:
    """The latest `stagebot` status of the PR's head."""
    return gh.latest_status(SHA, "stagebot")


def record_dispatch(gh: FakeGitHub, pipeline: int, run_id: int) -> None:
    """What `bot dispatch` does after starting the stage runs (here one): record the ids in the
    marker."""
    (reply,) = [c for c in replies(gh) if marker_of(c).pipeline == pipeline]
    marker = replace(marker_of(reply), stage_runs=(run_id,))
    reply["body"] = with_marker(reply["body"], marker)
