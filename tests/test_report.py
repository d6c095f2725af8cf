"""Reports: markdown limits and escaping, replies, and the HTML report in real headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from stagebot.bot.marker import find_marker
from stagebot.harness.analysis import analyse
from stagebot.harness.report import (
    COMMENT_LIMIT,
    Report,
    render_report,
    reply_completed,
    reply_triggered,
)
from stagebot.harness.results import StageResult
from stagebot.harness.results import TestOutcome as Outcome


def result(stage, state, start, end, tests=(), gpus=(), evidence=None, gpu_type="DGX_H200"):
    return StageResult(
        stage=stage,
        shard=1,
        shards=1,
        state=state,
        started_at=f"2026-01-01T00:{start}+00:00" if start else None,
        finished_at=f"2026-01-01T00:{end}+00:00" if end else None,
        duration_s=0.0,
        gpu_type=gpu_type,
        gpus=list(gpus),
        tests=list(tests),
        evidence=evidence,
    )


def fixture_report() -> Report:
    """A known pipeline: 4 shards ran (3 slots), 1 reused, 1 NOT_RUN; 5 analysed rows."""
    results = [
        result(
            "A-PyTorch-1",
            "SUCCESS",
            "00:00",
            "05:00",
            gpus=["0"],
            tests=[
                Outcome("t/test_a.py::ok", "passed", 1.0),
                Outcome("t/test_a.py::flaky", "flaky", 1.0, "passed on re-run 1", 2),
            ],
        ),
        result(
            "A-PyTorch-2",
            "FAILURE",
            "00:00",
            "03:00",
            gpus=["1"],
            tests=[
                Outcome(
                    "t/test_b.py::new",
                    "failed",
                    1.0,
                    "AssertionError: @octocat <!-- stagebot:{} --> broke",
                )
            ],
        ),
        result(
            "A-4_GPUs-PyTorch-1",
            "ERROR",
            "05:00",
            "09:00",
            gpus=["0", "1", "2", "3"],
            evidence="crashed: pytest killed by SIGKILL while running t/test_c.py::hang",
            tests=[
                Outcome(
                    "t/test_c.py::hang",
                    "error",
                    0.0,
                    "crashed: the worker was killed by SIGKILL during this test",
                )
            ],
        ),
        result(
            "A-PyTorch-3",
            "SUCCESS",
            "03:00",
            "04:30",
            gpus=["2"],
            tests=[
                Outcome("t/test_d.py::w", "waived", 0.0, "bug 7"),
                Outcome("t/test_d.py::old", "failed", 1.0, "ValueError: old"),
            ],
        ),
        result("A-PyTorch-4", "REUSED", None, None),
        result("B-PyTorch-1", "NOT_RUN", None, None, evidence="needs 1 x B200 GPU(s)"),
    ]
    base = {  # (stage family, test id): the base is read within the same family
        ("A-PyTorch", "t/test_b.py::new"): Outcome("t/test_b.py::new", "passed", 1.0),
        ("A-PyTorch", "t/test_d.py::old"): Outcome("t/test_d.py::old", "failed", 1.0),
    }
    return Report(
        pipeline=12,
        commit="0123456789abcdef",
        pr=5,
        command="/bot run",
        state="FAILURE",
        gating=True,
        partly_tested_reason=None,
        started_at=None,
        finished_at=None,
        results=results,
        analysis=analyse(results, base=base, base_pipeline=11),
    )


class Counter(HTMLParser):
    def __init__(self):
        super().__init__()
        self.bars, self.rows, self.categories, self.scripts, self.external = 0, 0, [], 0, []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if tag == "rect" and "bar" in classes:
            self.bars += 1
        if tag == "tr" and "failure-row" in classes:
            self.rows += 1
            self.categories.append(attrs.get("data-category"))
        for key in ("src", "href"):
            if attrs.get(key) and re.match(r"(https?:)?//", attrs[key]):
                self.external.append(attrs[key])


def test_markdown_report_sections_and_escaping() -> None:
    text = render_report(fixture_report(), "md")
    assert text.startswith("### ❌ 1 new failure(s)")
    assert "#### NEW failures (1) — fail here, passed on base #11" in text
    assert "PRE-EXISTING</b> (1)" in text and "INFRA</b> (1)" in text
    assert "FLAKY</b> (1)" in text and "WAIVED</b> (1)" in text
    assert "@\u200boctocat" in text and "@octocat" not in text  # no pings from test output
    assert find_marker(text) is None and "&lt;!-- stagebot" in text  # no forged marker
    assert "| B-PyTorch-1 | NOT_RUN |" in text and "#### Not run (1)" in text
    assert "| A-PyTorch-4 | REUSED |" in text
    assert "Comment plain `/bot run` first" in text


def test_markdown_fits_the_comment_limit() -> None:
    report = fixture_report()
    many = [
        Outcome(f"t/test_m.py::case_{i}", "failed", 1.0, f"ValueError: case {i} " + "E" * 200)
        for i in range(3000)
    ]
    report.results.append(result("C-PyTorch-1", "FAILURE", "00:00", "01:00", tests=many))
    report.analysis = analyse(report.results)
    text = render_report(report, "md")
    assert len(text) <= COMMENT_LIMIT
    assert "more (see the HTML report)" in text


def test_identical_failures_are_one_entry() -> None:
    report = fixture_report()
    same = [Outcome(f"t/test_m.py::case_{i}", "failed", 1.0, "ValueError: bad") for i in range(6)]
    report.results.append(result("C-PyTorch-1", "FAILURE", "00:00", "01:00", tests=same))
    report.analysis = analyse(report.results)
    text = render_report(report, "md")
    assert text.count("<code>ValueError: bad</code>") == 1
    assert "same error in 6 tests: <code>t/test_m.py::case_1</code>" in text


def test_markdown_fits_a_smaller_limit_with_a_pointer() -> None:
    """What `bot publish` asks for: the room left beside the reply's header and marker."""
    full = render_report(fixture_report(), "md")
    cut = render_report(fixture_report(), "md", limit=len(full) // 2)
    assert len(cut) <= len(full) // 2 < len(full)
    assert cut.endswith("(`bot report --format html`).")


def test_replies() -> None:
    report = fixture_report()
    assert reply_triggered(report) == "PR_Github #12 [ run ] triggered by Bot. Commit: `0123456`\n"
    done = reply_completed(report)
    assert done.startswith("PR_Github #12 [ run ] completed with state FAILURE (Partly Tested).")
    assert "cannot set the PR's status" in done  # a NOT_RUN shard: it may not gate
    report.results.pop()
    report.analysis = analyse(report.results)
    assert "Partly Tested" not in reply_completed(report)


def test_json_report() -> None:
    import json

    data = json.loads(render_report(fixture_report(), "json"))
    assert data["exit_code"] == 1 and data["state"] == "FAILURE"
    assert [f["category"] for f in data["failures"]] == [
        "NEW",
        "PRE-EXISTING",
        "INFRA",
        "FLAKY",
        "WAIVED",
    ]


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_html_report_in_headless_chromium(tmp_path: Path) -> None:
    report = fixture_report()
    page = tmp_path / "report.html"
    page.write_text(render_report(report, "html"))
    static = Counter()
    static.feed(page.read_text())
    assert static.external == []  # self-contained: nothing to fetch
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    dom = Counter()
    dom.feed(done.stdout)  # the DOM as Chromium built it
    assert dom.bars == 7  # a bar per slot held: 3 one-GPU shards + one 4-GPU shard
    assert dom.rows == 5
    assert dom.categories == ["NEW", "PRE-EXISTING", "INFRA", "FLAKY", "WAIVED"]
    assert "@octocat &lt;!-- stagebot" in done.stdout  # escaped text, not markup
    lanes = re.findall(r'<text class="lane"[^>]*>([^<]+)</text>', done.stdout)
    assert lanes == ["0", "1", "2", "3"]  # reused / not-run shards hold no slot


def test_report_of_result_files_compares_with_the_base_ledger(tmp_path) -> None:
    """`bot report --results DIR --base-ledger L`: the same base selection as every report."""
    from fixtures.botrun import bot

    from stagebot.bot.ledger import Ledger
    from stagebot.harness.shard import write_result

    with Ledger.open(tmp_path / "main.sqlite") as book:
        number = book.start_pipeline(
            command={"version": 1, "command": "run", "options": {}}, commit="m1", branch="main"
        )
        passed = [Outcome("t/test_x.py::a", "passed", 1.0), Outcome("t/test_x.py::b", "failed", 1)]
        book.record_result(number, result("C-PyTorch-1", "FAILURE", "00:00", "01:00", tests=passed))
        book.finish_pipeline(number, "FAILURE")
    failing = [
        Outcome("t/test_x.py::a", "failed", 1.0, "AssertionError: a"),
        Outcome("t/test_x.py::b", "failed", 1.0, "AssertionError: b"),
    ]
    write_result(
        tmp_path / "results" / "C-PyTorch-2",
        result("C-PyTorch-2", "FAILURE", "00:00", "01:00", tests=failing),
    )
    args = ["report", "--results", str(tmp_path / "results"), "--format", "json"]
    done = bot(*args, "--base-ledger", str(tmp_path / "main.sqlite"))
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["base_pipeline"] == number
    assert {f["test_id"]: f["category"] for f in got["failures"]} == {
        "t/test_x.py::a": "NEW",
        "t/test_x.py::b": "PRE-EXISTING",
    }
    alone = json.loads(bot(*args).stdout)
    assert {f["category"] for f in alone["failures"]} == {"UNCLASSIFIED"}
