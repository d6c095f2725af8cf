"""Reports: markdown limits and escaping, replies, and the HTML report in real headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest
from helpers.reports import fixture_report, result

from stagebot.bot.protocols.marker import find_marker
from stagebot.harness.analysis.classify import analyse
from stagebot.harness.report import (
    COMMENT_LIMIT,
    Report,
    render_report,
    reply_completed,
    reply_triggered,
)
from stagebot.harness.results import TestOutcome as Outcome


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
        # What a browser fetches: any src, a <link>'s href (an <a>'s href is only followed).
        fetched = [attrs.get("src")] + ([attrs.get("href")] if tag == "link" else [])
        for url in fetched:
            if url and re.match(r"(https?:)?//", url):
                self.external.append(url)


def test_markdown_report_sections_and_escaping() -> None:
    text = render_report(fixture_report(), "md")
    assert text.startswith("### ❌ 1 new failure(s)")
    assert "#### NEW failures (1) — fail here, not this way on base #11" in text
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
    # gating with a NOT_RUN shard: it still sets the status (failure here), and the reply says so
    assert done.startswith("PR_Github #12 [ run ] completed with state FAILURE. Commit")
    assert "Partly Tested" not in done
    assert "status is set to **failure**" in done
    report.results.pop()
    report.analysis = analyse(report.results)
    assert "Partly Tested" not in reply_completed(report)
    report.gating = False
    partial = reply_completed(report)
    assert partial.count("Partly Tested") == 1 and "status is left alone" in partial


def _gating_report(results, state: str | None = None, gating: bool = True) -> Report:
    analysis = analyse(results)
    return Report(
        pipeline=7,
        commit="0123456789abcdef",
        pr=5,
        command="/bot run",
        state=state or analysis.state,
        gating=gating,
        partly_tested_reason=None if gating else "--stage-list picks the stages",
        started_at=None,
        finished_at=None,
        results=results,
        analysis=analysis,
    )


@pytest.mark.parametrize(
    ("states", "gating", "status"),
    [
        pytest.param(["SUCCESS"], True, "success", id="all passed"),
        pytest.param(["SUCCESS", "NOT_RUN"], True, "error", id="passed, one could not run"),
        pytest.param(["FAILURE", "NOT_RUN"], True, "failure", id="failed, one could not run"),
        pytest.param(["NOT_RUN", "NOT_RUN"], True, "error", id="nothing ran"),
        pytest.param(["SUCCESS", "NOT_RUN"], False, None, id="Partly Tested"),
    ],
)
def test_the_reply_says_the_status_publish_sets(states, gating, status) -> None:
    """One decision (Report.status): what the reply announces is what `bot publish` sets."""
    tests = {"SUCCESS": "passed", "FAILURE": "failed"}
    results = [
        result(
            f"S-PyTorch-{i}",
            state,
            None,
            None,
            tests=[Outcome(f"t/test_s.py::t{i}", tests[state], 1.0)] if state in tests else [],
            evidence="needs 1 x B200 GPU(s)" if state == "NOT_RUN" else None,
        )
        for i, state in enumerate(states, start=1)
    ]
    report = _gating_report(results, gating=gating)
    assert report.status.state == status
    done = reply_completed(report)
    markdown = render_report(report, "md").split("#### Re-running")[0]  # the header and notes
    if status is None:
        assert "Partly Tested" in done and "set to" not in done
        assert markdown.count("(Partly Tested)") == 2, "the header and the note, each once"
        assert "(Partly Tested) (Partly Tested)" not in markdown.replace("**", "")
    else:
        assert f"status is set to **{status}**" in done and "Partly Tested" not in done
        assert "Partly Tested" not in markdown
        assert "✅" not in markdown.splitlines()[0] or status == "success"


def test_a_run_with_a_shard_that_could_not_run_is_not_run_whatever_else_passed() -> None:
    results = [result("S-PyTorch-1", "NOT_RUN", None, None, evidence="no CPU slot")]
    report = _gating_report(results)
    assert (report.analysis.state, report.exit_code) == ("NOT_RUN", 4)
    assert report.headline().startswith("⚠️ Nothing ran")
    reused = [*results, result("S-PyTorch-2", "REUSED", None, None)]
    assert analyse(reused).state == "NOT_RUN", "reused results are not a run here"
    ran = _gating_report([*results, result("S-PyTorch-3", "SUCCESS", None, None, tests=[])])
    assert (ran.state, ran.exit_code) == ("NOT_RUN", 4), "one decision: never SUCCESS, exit 0"
    assert ran.headline().startswith("⚠️ Everything that ran passed, but 1 shard(s) could not")
    assert ran.status.state == "error"
    passed = [result("S-PyTorch-3", "SUCCESS", None, None, tests=[])]
    assert analyse(passed).state == "SUCCESS", "the negative control: all ran and passed"


def test_a_dirty_tree_says_so_in_the_headers() -> None:
    report = fixture_report()
    report.commit = "0123456789abcdef+dirty.abcdef123456"
    markdown = render_report(report, "md")
    html = render_report(report, "html")
    assert "commit `0123456+dirty`" in markdown
    assert "**Uncommitted changes:**" in markdown and "nothing recorded for 0123456" in markdown
    assert "Uncommitted changes" in html and "0123456+dirty" in html
    assert "Uncommitted" not in render_report(fixture_report(), "md")


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


def dump_dom(page: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """The DOM of ``page`` as headless Chromium built it (its scripts run first)."""
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
            "--window-size=1280,1000",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_html_report_in_headless_chromium(tmp_path: Path) -> None:
    report = fixture_report()
    page = tmp_path / "report.html"
    page.write_text(render_report(report, "html"))
    static = Counter()
    static.feed(page.read_text())
    assert static.external == []  # self-contained: nothing to fetch
    done = dump_dom(page, tmp_path)
    dom = Counter()
    dom.feed(done.stdout)  # the DOM as Chromium built it
    assert dom.bars == 7  # a bar per slot held: 3 one-GPU shards + one 4-GPU shard
    assert dom.rows == 5
    assert dom.categories == ["NEW", "PRE-EXISTING", "INFRA", "FLAKY", "WAIVED"]
    assert "@octocat &lt;!-- stagebot" in done.stdout  # escaped text, not markup
    lanes = re.findall(r'<text class="lane"[^>]*>([^<]+)</text>', done.stdout)
    assert lanes == ["0", "1", "2", "3"]  # reused / not-run shards hold no slot
    # Each failure's signature and key lines, as the markdown report gives them.
    signatures = re.findall(r'<b class="signature">([^<]*)</b>', done.stdout)
    assert signatures == [
        "assertion",
        "ValueError",
        "runner killed",
        "flaky: passed on re-run 1 once",
    ]
    key_lines = re.findall(
        r'<details class="key-lines"[^>]*>.*?<pre>(.*?)</pre>', done.stdout, re.S
    )
    assert len(key_lines) == 4
    assert key_lines[0] == "AssertionError: @octocat &lt;!-- stagebot:{} --&gt; broke\n"


def test_html_report_links_a_full_log_over_http_or_as_a_local_file() -> None:
    """The stage job's URL is a link; a local file is a link to that file (relative: no root
    is known here); any other scheme is only ever part of a file name."""
    report = fixture_report()
    links = ["https://github.com/o/r/actions/runs/7/job/9", "results/A-PyTorch-3/pytest.log"]
    links.append("javascript:alert(1)")
    failures = list(report.analysis.failures)
    for i, link in enumerate(links):
        failures[i] = replace(failures[i], log_link=link)
    report.analysis = replace(report.analysis, failures=failures)
    page = render_report(report, "html")
    assert '<a href="https://github.com/o/r/actions/runs/7/job/9">full log</a>' in page
    local = '<a href="results/A-PyTorch-3/pytest.log">full log</a>: <code>results/A-PyTorch-3/'
    assert local in page
    hostile = '<a href="javascript%3Aalert%281%29">full log</a>: <code>javascript:alert(1)</code>'
    assert hostile in page
    assert 'href="javascript:' not in page  # a relative link to a file of that name


EMOJI = re.compile("[\u2600-\u27bf\U0001f300-\U0001faff\ufe0f]")
# measures the laid-out page: appended to a copy of the report (the report itself has no script)
MEASURE = """<script>
const cell = (table, column) =>
  document.querySelector(`#${table} tr:nth-child(2) td:nth-child(${column})`);
document.body.dataset.stageWidth = cell("failures", 3).getBoundingClientRect().width;
const text = document.createRange();
text.selectNodeContents(cell("failures", 3));
document.body.dataset.stageLines = text.getClientRects().length;
document.body.dataset.pageWidth = document.documentElement.scrollWidth;
</script>"""


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_html_report_reads_well_in_chromium(tmp_path: Path) -> None:
    """No emoji boxes or literal backticks in the headline, a time axis under the timeline, and
    a long test id wraps in its own cell instead of squeezing the stage names."""
    report = fixture_report()
    long_id = "harness/suites/x/test_equivalence.py::test_case[" + "-".join(["param"] * 40) + "]"
    report.results[1].tests[0] = Outcome(long_id, "failed", 1.0, "AssertionError: " + "x" * 400)
    report.state = "ABORTED"  # its headline says "comment `/bot run` to start again"
    report.analysis = analyse(report.results, cancelled=True)
    page = tmp_path / "report.html"
    page.write_text(render_report(report, "html") + MEASURE)
    dom = dump_dom(page, tmp_path).stdout
    headline = re.search(r"<h1>(.*?)</h1>", dom, re.S)[1]
    assert not EMOJI.search(headline) and "`" not in headline
    assert "<code>/bot run</code>" in headline
    ticks = re.findall(r'<text class="tick"[^>]*>([^<]+)</text>', dom)
    assert ticks[0] == "0s" and len(ticks) >= 3
    measured = {k: float(v) for k, v in re.findall(r'data-(\w+)-width="([\d.]+)"', dom)}
    lines = int(re.search(r'data-stage-lines="(\d+)"', dom)[1])
    assert measured["stage"] >= 80 and lines == 1, "the stage name stays on one line"
    assert measured["page"] <= 1280, "nothing widens the page past the window"


def test_report_of_result_files_compares_with_the_base_ledger(tmp_path) -> None:
    """`bot report --results DIR --base-ledger L`: the same base selection as every report."""
    from fixtures.botrun import bot

    from stagebot.harness.ledger.book import Ledger
    from stagebot.harness.run.shard import write_result

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
