"""Every reply and report, rendered as GitHub renders markdown (CommonMark plus GFM tables, by
markdown-it-py): the tables and links each one means to show are there, and no table is left
as raw ``| … |`` text (what GitHub shows when a table lacks the blank line before it)."""

from __future__ import annotations

import re

import pytest
from helpers.reports import fixture_report
from markdown_it import MarkdownIt

from stagebot.bot.comments.grammar import SUBCOMMANDS, help_text
from stagebot.bot.comments.replies import render_reply
from stagebot.bot.protocols.marker import ReplyMarker
from stagebot.harness.report import render_report, reply_completed, reply_triggered

GFM = MarkdownIt("commonmark").enable("table")
SHA = "0123456789abcdef0123456789abcdef01234567"
MARKER = ReplyMarker(9, SHA, 77, "RUNNING", {})
URL = "https://github.com/o/r/pull/7#issuecomment-77"
RUN_URL = "https://github.com/o/r/actions/runs/5"


def shape(markdown: str) -> dict[str, int]:
    """What GitHub would show: tables, links, and rows of a table left as raw text."""
    html = GFM.render(markdown)
    raw_rows = [line for line in re.findall(r"<p>(.*?)</p>", html, re.S) if "|---" in line]
    return {
        "tables": html.count("<table>"),
        "links": len(re.findall(r"<a href=", html)),
        "raw_table_text": len(raw_rows),
    }


def _reply(kind: str, **context) -> str:
    common = dict(pipeline=9, sha7=SHA[:7], login="alice", comment_url=URL, run_url=RUN_URL)
    return render_reply(kind, MARKER, status_context="stagebot", **{**common, **context})


HELP_TABLES = sum(bool(sub.flags) for sub in SUBCOMMANDS.values())
CASES = {
    "help": (lambda: _reply("help", help=help_text()), HELP_TABLES, 0),
    "malformed (😕, with the help)": (
        lambda: _reply("malformed", error="unknown command 'rn'", help=help_text()),
        HELP_TABLES,
        0,
    ),
    "triggered": (
        lambda: _reply(
            "triggered",
            command="/bot run",
            commit=SHA,
            cancelled=[3],
            counts={"run": 2, "reuse": 1, "skip": 0},
            partly_tested_reason=None,
        ),
        0,
        2,  # the workflow run and the triggering comment
    ),
    "refused": (
        lambda: _reply("refused", command="/bot run", why="needs write", label_missing=True),
        0,
        0,
    ),
    "killed": (lambda: _reply("killed", killed=[3, 4]), 0, 0),
    "skipped": (lambda: _reply("skipped", reason="docs only"), 0, 0),
    "reused": (
        lambda: _reply(
            "reused",
            ok=True,
            why="ok",
            source=2,
            source_sha7="abcdef0",
            changed=["README.md"],
            stopped=[5],
        ),
        0,
        0,
    ),
    "aborted": (lambda: _reply("aborted", why="Superseded by PR_Github #10."), 0, 0),
    "report": (lambda: render_report(fixture_report(), "md"), 1, 0),  # the stages table
    "report replies": (
        lambda: reply_triggered(fixture_report()) + "\n" + reply_completed(fixture_report()),
        0,
        0,
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_every_reply_renders_its_tables_and_links(name: str) -> None:
    render, tables, links = CASES[name]
    assert shape(render()) == {"tables": tables, "links": links, "raw_table_text": 0}


def test_the_help_flag_table_has_a_row_per_flag() -> None:
    html = GFM.render(help_text())
    flags = sum(len(sub.flags) for sub in SUBCOMMANDS.values())
    assert html.count("<tr>") == flags + HELP_TABLES  # the rows plus each table's header row
