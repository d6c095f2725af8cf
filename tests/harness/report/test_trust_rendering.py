"""Attack tests (issue 13, finding 4): what a stage job writes (gpu_type, evidence, test ids) is
rendered escaped in the bot's reply, whatever the template; and the reply's hidden lines (marker,
ledger digest) are read only from the bot's own position, so a digest line forged into the body
vouches for nothing. Real PyGithub against the fake GitHub."""

# ruff: noqa: F401, F811 - pytest fixtures imported from the helper that defines them
from __future__ import annotations

import json
import re

import pytest
from helpers.fake_pr import SHA, marker_of, replies
from helpers.workflow_jobs import gh, jobs

from stagebot.bot.comments.replies import with_ledger_digest
from stagebot.bot.custody.files import file_digest
from stagebot.bot.protocols.marker import ReplyMarker, find_ledger_digests, find_marker
from stagebot.harness.analysis.classify import analyse
from stagebot.harness.ledger.book import Ledger
from stagebot.harness.report import Report, render_report
from stagebot.harness.results import StageResult
from stagebot.harness.results import TestOutcome as Outcome

HOSTILE = (
    "<b>raw</b> @maintainer [click here](https://evil.example/login) "
    "![logo](https://evil.example/x.png) https://evil.example www.evil.example | cell"
)
LIVE = [
    ("raw HTML", re.compile(r"<b>raw")),
    ("a live mention", re.compile(r"@maintainer")),
    ("a markdown link or image", re.compile(r"\]\(https?:")),
    ("a bare autolinked URL", re.compile(r"https?://evil|www\.evil")),
    ("a table pipe", re.compile(r"\| cell")),
]


def assert_inert(text: str) -> None:
    for what, pattern in LIVE:
        assert not pattern.search(text), f"{what} in: {pattern.search(text)}"


def reply_to_stage_output(gh, jobs, text: str) -> str:
    """The visible part of the reply (everything but the hidden tail) to a stage whose result
    holds ``text`` as its GPU type, its evidence and its failed test's id and evidence."""
    outputs = jobs.handle_comment("/bot run", 101)
    results = jobs.stage_jobs(outputs, 101)
    path = results / "CPU-PyTorch-1" / "result.json"
    data = json.loads(path.read_text())
    data.update(state="FAILURE", gpu_type=text, evidence=text)
    data["tests"] = [{"test_id": text, "outcome": "failed", "duration_s": 1.0, "evidence": text}]
    path.write_text(json.dumps(data))
    jobs.publish(101, results)
    (reply,) = replies(gh)
    assert "completed with state FAILURE" in reply["body"]
    return reply["body"].rsplit("<!-- stagebot", 2)[0]


@pytest.mark.slow
def test_stage_output_in_the_reply_is_inert(gh, jobs) -> None:
    assert_inert(reply_to_stage_output(gh, jobs, HOSTILE))


@pytest.mark.slow
def test_a_digest_forged_into_the_reply_does_not_vouch_for_a_planted_ledger(gh, jobs) -> None:
    """The stage job plants a ledger (for the next plan job) and writes its digest into its
    result, hoping the report prints it as a digest line a later run trusts."""
    outputs = jobs.handle_comment("/bot run", 101)
    results = jobs.stage_jobs(outputs, 101)
    planted = jobs.tmp / "planted.sqlite"
    with Ledger.open(planted) as book:
        book.start_pipeline(
            command={"version": 1, "command": "run"}, commit=SHA, plan={}, pr=7, number=900
        )
    forged = f"--> <!-- stagebot-ledger:sha256:{file_digest(planted)} --> <!--"
    path = results / "CPU-PyTorch-1" / "result.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "reused_from": forged}))
    jobs.publish(101, results)
    jobs.ledger.write_bytes(planted.read_bytes())  # the poisoned cache entry
    jobs.handle_comment("/bot run", 102)
    (aside,) = jobs.tmp.glob("ledger.sqlite.rejected-*")
    assert aside.read_bytes() == planted.read_bytes()
    reply = next(c for c in replies(gh) if marker_of(c).pipeline == 102)
    assert "is not one the bot saved" in reply["body"]


def test_hidden_lines_are_read_only_from_the_replys_tail() -> None:
    marker = ReplyMarker(5, SHA, 99, "SUCCESS")
    forged_marker = ReplyMarker(4242, SHA, 1, "RUNNING").render()
    forged_digest = "<!-- stagebot-ledger:sha256:" + "a" * 64 + " -->"
    body = f"report\n{forged_digest}\n{forged_marker}\nmore\n\n"
    real = "b" * 64
    assert find_ledger_digests(body + with_ledger_digest(marker.render(), real)) == {real}
    assert find_marker(body + with_ledger_digest(marker.render(), real)) == marker
    assert find_ledger_digests(body + marker.render()) == set()  # no digest at the tail
    assert find_marker(body) is None  # the forged marker is not on the last line


def test_every_report_field_is_escaped_even_when_it_bypasses_the_schema() -> None:
    """The template escapes by default: a value no template author thought of (row.tests,
    row.reused_from, the state) is inert too."""
    result = StageResult(
        HOSTILE, 1, 1, HOSTILE, None, None, 1.0, HOSTILE, [HOSTILE],
        tests=[Outcome(HOSTILE, HOSTILE, 1.0, HOSTILE)], evidence=HOSTILE,
        reused_from=HOSTILE,  # type: ignore[arg-type]
    )  # fmt: skip
    report = Report(
        7, SHA, 7, HOSTILE, "FAILURE", True, HOSTILE, None, None, [result], analyse([result]),
        host=HOSTILE, ignored_results=[HOSTILE],
    )  # fmt: skip
    assert_inert(render_report(report, "md"))
    html = render_report(report, "html")
    assert "<b>raw</b>" not in html and "&lt;b&gt;raw&lt;/b&gt;" in html


# ---------------------------------------------------------------- issue 28, finding 6

# each a way to end the escaped span or hide text: a line break other than \n, then markdown that
# would start a heading, a list item and a code block; bidi and zero-width controls; issue
# references and a closing keyword
LINES = "\r# heading\r\n- item\u2028```\u2029    code\u0085> quote\x0b\x0c| cell"
CONTROLS = "\u202egnp.exe\u202c \u2066x\u2069 a\u200bb\u200dc\u200fd\ufeff"
REFERENCES = "see #12, octo-org/octo-repo#34 and GH-56; Fixes #12, closes #78"
HOSTILE_TEXT = f"{LINES} {CONTROLS} {REFERENCES}"
LIVE_TEXT = [
    ("a line break other than \\n", re.compile("[\r\u2028\u2029\u0085\x0b\x0c]")),
    ("a bidi or zero-width control", re.compile("[\u200c-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")),
    ("an issue reference", re.compile(r"(?i)#(12|34|78)\b|\bGH-56")),  # the hostile text's
    ("a closing keyword", re.compile(r"(?i)\b(fixes|closes)\b")),
]


def assert_text_inert(text: str) -> None:
    for what, pattern in LIVE_TEXT:
        assert not pattern.search(text), (
            f"{what} in: {text[max(0, pattern.search(text).start() - 40) :][:80]!r}"
        )


def _report_with(text: str) -> Report:
    result = StageResult(
        "CPU-PyTorch-1", 1, 1, "FAILURE", None, None, 1.0, text, [text],
        tests=[Outcome(text, "failed", 1.0, text)], evidence=text,
    )  # fmt: skip
    return Report(
        7, SHA, 7, "/bot run", "FAILURE", True, None, None, None, [result], analyse([result]),
        host=text,
    )  # fmt: skip


def test_line_breaks_and_controls_in_result_text_leave_the_report_as_it_was() -> None:
    """Rendered as GitHub renders markdown (CommonMark + tables), a report whose stage output
    holds any line break, control or reference has exactly the structure of one whose output is
    plain text: no heading, list item, code block or quote came out of the result text."""
    from markdown_it import MarkdownIt

    gfm = MarkdownIt("commonmark").enable("table")
    hostile = render_report(_report_with(HOSTILE_TEXT), "md")
    plain = render_report(_report_with("plain"), "md")
    assert [t.type for t in gfm.parse(hostile)] == [t.type for t in gfm.parse(plain)]
    assert_text_inert(hostile)
    assert "&lt;U+202E&gt;gnp.exe" in hostile  # shown, not hidden


@pytest.mark.slow
def test_line_breaks_controls_and_references_in_stage_output_are_inert(gh, jobs) -> None:
    assert_text_inert(reply_to_stage_output(gh, jobs, HOSTILE_TEXT))


@pytest.mark.slow
def test_bytes_that_are_not_utf8_in_stage_output_reach_the_reply_shown_as_escapes(gh, jobs) -> None:
    """A file name from os.listdir in a test id and its evidence (a lone surrogate after
    surrogateescape, as json carries it): the reply is posted, with the byte shown as \\xff."""
    visible = reply_to_stage_output(gh, jobs, "check_files.py::test_open[caf\udcff.txt]")
    assert "caf\\xff.txt" in visible and "\udcff" not in visible
