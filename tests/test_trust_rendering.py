"""Attack tests (issue 13, finding 4): what a stage job writes (gpu_type, evidence, test ids) is
rendered escaped in the bot's reply, whatever the template; and the reply's hidden lines (marker,
ledger digest) are read only from the bot's own position, so a digest line forged into the body
vouches for nothing. Real PyGithub against the fake GitHub."""

# ruff: noqa: F401, F811 - pytest fixtures imported from the test modules that define them
from __future__ import annotations

import json
import re

import pytest
from test_handle_event import SHA, marker_of, replies
from test_handle_event_e2e import Pipeline, gh

from stagebot.bot.ledger_files import file_digest
from stagebot.bot.marker import ReplyMarker, find_ledger_digests, find_marker
from stagebot.bot.replies import with_ledger_digest
from stagebot.harness.analysis import analyse
from stagebot.harness.ledger import Ledger
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


@pytest.fixture
def pipeline(gh, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    return Pipeline(gh, tmp_path, monkeypatch, capsys)


def assert_inert(text: str) -> None:
    for what, pattern in LIVE:
        assert not pattern.search(text), f"{what} in: {pattern.search(text)}"


@pytest.mark.slow
def test_stage_output_in_the_reply_is_inert(gh, pipeline) -> None:
    outputs = pipeline.comment("/bot run", 101)
    results = pipeline.stages(outputs, 101)
    path = results / "CPU-PyTorch-1" / "result.json"
    data = json.loads(path.read_text())
    data.update(state="FAILURE", gpu_type=HOSTILE, evidence=HOSTILE)
    data["tests"] = [
        {"test_id": HOSTILE, "outcome": "failed", "duration_s": 1.0, "evidence": HOSTILE}
    ]
    path.write_text(json.dumps(data))
    pipeline.report(101, results)
    (reply,) = replies(gh)
    assert "completed with state FAILURE" in reply["body"]
    assert_inert(reply["body"].rsplit("<!-- stagebot", 2)[0])  # everything but the hidden tail


@pytest.mark.slow
def test_a_digest_forged_into_the_reply_does_not_vouch_for_a_planted_ledger(gh, pipeline) -> None:
    """The stage job plants a ledger (for the next plan job) and writes its digest into its
    result, hoping the report prints it as a digest line a later run trusts."""
    outputs = pipeline.comment("/bot run", 101)
    results = pipeline.stages(outputs, 101)
    planted = pipeline.tmp / "planted.sqlite"
    with Ledger.open(planted) as book:
        book.start_pipeline(
            command={"version": 1, "command": "run"}, commit=SHA, plan={}, pr=7, number=900
        )
    forged = f"--> <!-- stagebot-ledger:sha256:{file_digest(planted)} --> <!--"
    path = results / "CPU-PyTorch-1" / "result.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "reused_from": forged}))
    pipeline.report(101, results)
    pipeline.ledger.write_bytes(planted.read_bytes())  # the poisoned cache entry
    pipeline.comment("/bot run", 102)
    (aside,) = pipeline.tmp.glob("ledger.sqlite.rejected-*")
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
