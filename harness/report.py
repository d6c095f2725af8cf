"""The pipeline report: markdown (the PR comment), self-contained HTML, or JSON; and the replies.

API (also used by the GitHub adapter)::

    base = select_base(ledger, base_commit=record.base_commit, exclude=n)  # bot/base.py
    report = report_from_record(ledger.pipeline(n), base=base, root=Path("."))
    report = report_from_results(Path("results/"), base=base)  # StageResult folders (Actions)
    text = render_report(report, "md")               # "md" | "html" | "json"
    reply_triggered(report) / reply_completed(report)

The markdown fits GitHub's 65,536-character comment limit (it shortens the key lines, then drops
them and collapses long lists, then cuts with a pointer to the HTML report), and escapes
@mentions and anything that looks like HTML (so test output can never forge the bot's hidden
reply marker).
"""

from __future__ import annotations

import html
import json
import re
import shlex
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stagebot.harness.analysis import BLOCKING, Analysis, analyse
from stagebot.harness.causes import cause_line, is_environment
from stagebot.harness.results import ResultError, StageResult
from stagebot.harness.streams import read_stream
from stagebot.templates.markdown import Trusted, escape, url

if TYPE_CHECKING:
    from markupsafe import Markup

COMMENT_LIMIT = 65_536
HEADLINE_MARKS = re.compile("(?:✅|❌|⚠️|⏹️|🛠️) ?")
INLINE_CODE = re.compile(r"`([^`]+)`")
TICK_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14_400, 28_800)
BLANK_LINES = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")
TEMPLATE_TAGS = re.compile(r"</?(?:details|summary|pre|b)(?: open)?>|<code>|</code>")


@dataclass(frozen=True)
class StatusDecision:
    """The gating commit status a pipeline sets: ``state`` (success | failure | error) with its
    ``description``; ``state`` None when the pipeline leaves the status alone (Partly Tested)."""

    state: str | None
    description: str


@dataclass
class Report:
    pipeline: int | None
    commit: str | None
    pr: int | None
    command: str
    state: str  # pipeline state (SUCCESS | FAILURE | ABORTED | NOT_RUN | RUNNING)
    gating: bool
    partly_tested_reason: str | None
    started_at: str | None
    finished_at: str | None
    results: list[StageResult]
    analysis: Analysis
    changed_files: list[str] | None = None
    slots: dict[str, list[str]] = field(default_factory=dict)
    reused_tests: dict[str, list[str]] = field(default_factory=dict)
    host: str = ""
    triggered_by: str = ""  # who started a local run (the OS user); the bot's replies say it
    ignored_results: list[str] = field(default_factory=list)  # result files not accepted
    local: bool = False  # a `bot run` on this machine: no PR, no status, no comments
    ledger: str = ""  # where a local run is recorded (its re-run must use the same ledger)
    base_note: str = ""  # which pipeline failures were compared with, and how it was found
    root: Path | None = None  # the checkout the tests ran from (the HTML links its files)

    @property
    def exit_code(self) -> int:
        return self.analysis.exit_code

    @property
    def status(self) -> StatusDecision:
        """The one decision of the status this pipeline sets: the reply says what `bot publish`
        sets. A gating pipeline always sets one; shards that could not run make it an error."""
        own = f"PR_Github #{self.pipeline}"
        if not self.gating:
            return StatusDecision(None, "Partly Tested: the status is left alone")
        if self.state == "FAILURE":
            return StatusDecision("failure", f"{own} failed: {self.headline()}")
        if self.state == "ABORTED":
            return StatusDecision("error", f"{own} was aborted before it finished")
        if self.state != "SUCCESS" or self.analysis.not_run:
            missing = len(self.analysis.not_run)
            return StatusDecision("error", f"{own} could not run {missing} stage(s): not a pass")
        return StatusDecision("success", f"{own} passed on {self.sha7}")

    @property
    def sets_status(self) -> bool:
        return self.status.state is not None

    @property
    def dirty(self) -> bool:
        """Run on a work tree with uncommitted changes (bot/worktree.py's identity)."""
        return "+dirty." in (self.commit or "")

    @property
    def sha7(self) -> str:
        return (self.commit or "unknown")[:7] + ("+dirty" if self.dirty else "")

    def dirty_note(self) -> str:
        """Why a dirty tree's run reused nothing recorded for its commit."""
        sha = (self.commit or "").partition("+")[0]
        return (
            f"the work tree differs from commit {sha[:7]}, so this run is recorded as "
            f"{self.commit} and only that exact state can reuse its results: nothing recorded "
            f"for {sha[:7]} itself was reused. Commit or stash the changes to reuse results."
        )

    @property
    def label(self) -> Trusted:
        """How the replies name this pipeline: on GitHub its PR_Github number, locally its
        ledger's (the bot's own words around a number: not escaped, so "#12" stays as written)."""
        return Trusted(
            f"pipeline #{self.pipeline}" if self.local else f"PR_Github #{self.pipeline}"
        )

    def local_command(self) -> str:
        """The `bot run` that runs this pipeline's command on this machine."""
        return f"bot run {_shell_word(self.command)}"

    def again(self) -> str:
        """How to run this pipeline's command again: a `/bot run` comment on GitHub, the same
        `bot run` (the same ledger) on this machine."""
        return f"run `{self.local_command()}` again" if self.local else "comment `/bot run`"

    def partly_tested(self) -> str:
        """The one sentence that explains "(Partly Tested)": the cause and what follows."""
        why = self.partly_tested_reason or "this run did not cover the whole default selection"
        if self.local:
            return (
                f"{why}: a run like this does not set a PR's status; "
                "`bot run '/bot run'` runs all of it."
            )
        return f"{why}, so this run does not set the PR's status; comment plain `/bot run` for it."

    def headline(self) -> str:
        counts = self.analysis.counts()
        blocking = sum(counts[c] for c in BLOCKING)
        not_run = len(self.analysis.not_run)
        if self.state == "ABORTED":
            return f"⏹️ Cancelled before it finished — {self.again()} to start again."
        if self.state == "NOT_RUN":
            return (
                f'⚠️ Nothing ran: {not_run} shard(s) could not run on this host (see "Not run") '
                "— nothing was tested, so this is not a pass."
            )
        if counts["NEW"]:
            return (
                f"❌ {counts['NEW']} new failure(s) {'these changes' if self.local else 'this PR'} "
                f"likely caused — fix them, then {self.again()} (it re-runs only what failed)."
            )
        if blocking:
            what = []
            if counts["PRE-EXISTING"]:
                what.append(f"{counts['PRE-EXISTING']} also failing on base")
            if counts["UNCLASSIFIED"]:
                what.append(f"{counts['UNCLASSIFIED']} with no base to compare")
            return f"❌ {blocking} failure(s) ({', '.join(what)}) — look at them below."
        if counts["INFRA"] and self.environment_errors():
            return (
                f"🛠️ {len(self.environment_errors())} shard(s) could not run in their environment "
                "— fix it (see INFRA below); a re-run there fails the same way."
            )
        if counts["INFRA"]:
            return (
                f"🛠️ {counts['INFRA']} infrastructure failure(s) only (timeouts, crashes, "
                f"runtime errors) — {self.again()} to retry; reuse re-runs only what failed."
            )
        flaky = f" ({counts['FLAKY']} flaky test(s) listed below)" if counts["FLAKY"] else ""
        if not_run:
            return (
                f"⚠️ Everything that ran passed{flaky}, but {not_run} shard(s) could not run "
                '(see "Not run") — not a pass.'
            )
        if not self.gating:
            return f"✅ Everything that ran passed{flaky} — Partly Tested, see below."
        return f"✅ All stages passed{flaky} — nothing to do."

    def stage_rows(self) -> list[dict[str, Any]]:
        rows = []
        for result in self.results:
            counts: dict[str, int] = {}
            for test in result.tests:
                counts[test.outcome] = counts.get(test.outcome, 0) + 1
            reused = len(self.reused_tests.get(result.stage, []))
            rows.append(
                {
                    "stage": result.stage,
                    "state": result.state,
                    "duration": _duration(result.duration_s),
                    "gpu": result.gpu_type + (f" ({','.join(result.gpus)})" if result.gpus else ""),
                    "reused_from": f"#{result.reused_from}" if result.reused_from else "",
                    "tests": ", ".join(f"{n} {o}" for o, n in counts.items())
                    + (f"{', ' if counts else ''}{reused} reused" if reused else ""),
                    "note": cause_line(result.evidence) if result.state != "SUCCESS" else "",
                }
            )
        return rows

    def environment_errors(self) -> list[StageResult]:
        """ERROR shards whose environment cannot run them: re-running does not help."""
        return [r for r in self.results if r.state == "ERROR" and is_environment(r.evidence)]

    def infra_advice(self) -> str:
        """What the INFRA section's header says to do: the same as its entries (an environment
        that cannot run a shard is fixed first, a re-run as it is fails the same way)."""
        environment = {result.stage for result in self.environment_errors()}
        if not environment:
            return "the machine's fault (GPU, disk, network, runner): retry"
        if all(failure.stage in environment for failure in self.analysis.of("INFRA")):
            return "the environment's fault: fix it first, a re-run as it is fails the same way"
        return (
            f"fix the environment of {', '.join(sorted(environment))} first (a re-run as it is "
            "fails the same way); the rest are the machine's fault: retry"
        )

    def timeline(self, width: int = 900, lane_height: int = 26) -> dict[str, Any]:
        """Gantt bars by slot: one bar per slot each shard that ran held (x/width in px)."""
        spans = []
        for result in self.results:
            if not result.started_at or not result.finished_at:
                continue
            start = datetime.fromisoformat(result.started_at).timestamp()
            end = datetime.fromisoformat(result.finished_at).timestamp()
            for lane in self.slots.get(result.stage) or result.gpus or ["CPU"]:
                spans.append((lane, start, max(end, start), result))
        if not spans:
            return {
                "lanes": [],
                "bars": [],
                "ticks": [],
                "width": width,
                "height": lane_height,
                "span": 0,
            }
        t0 = min(s for _, s, _, _ in spans)
        span = max(e for _, _, e, _ in spans) - t0 or 1.0
        lanes = sorted({lane for lane, *_ in spans})
        label = 110
        scale = (width - label - 10) / span
        bars = [
            {
                "lane": lane,
                "y": lanes.index(lane) * lane_height + 4,
                "x": round(label + (start - t0) * scale, 1),
                "w": round(max((end - start) * scale, 3), 1),
                "stage": result.stage,
                "state": result.state,
                "title": f"{result.stage}: {result.state}, {_duration(result.duration_s)}",
            }
            for lane, start, end, result in spans
        ]
        step = next((s for s in TICK_STEPS_S if span / s <= 6), span)
        ticks = [
            {"x": round(label + t * scale, 1), "label": f"{t:g}s" if t < 60 else _duration(t)}
            for t in (i * step for i in range(int(span // step) + 1))
        ]
        lanes_height = len(lanes) * lane_height + 8
        return {
            "lanes": [{"name": n, "y": i * lane_height + 4} for i, n in enumerate(lanes)],
            "bars": bars,
            "ticks": ticks,  # the time axis: elapsed time since the first shard started
            "width": width,
            "lanes_height": lanes_height,
            "height": lanes_height + 18,
            "span": _duration(span),
        }


def report_from_record(
    record,
    *,
    base=None,
    cancelled: bool | None = None,
    root: Path | None = None,
    log_links: dict[str, str] | None = None,
) -> Report:
    """A Report of a ledger ``PipelineRecord`` (see ``bot.ledger``) against ``base`` (a
    ``bot.base.Base``); ``root``: the checkout the tests ran from (suspects read its imports);
    ``log_links``: stage -> the full log's URL (the stage job on GitHub), else the local file."""
    plan = record.plan or {}
    meta = record.meta or {}
    order = {shard["stage"]: i for i, shard in enumerate(plan.get("shards", []))}
    results = sorted(record.results, key=lambda r: order.get(r.stage, len(order)))
    analysis = analyse(
        results,
        **_base_arguments(base),
        changed_files=plan.get("changed_files"),
        stage_paths=meta.get("stage_paths"),
        logs=record.logs,
        cancelled=record.state == "ABORTED" if cancelled is None else cancelled,
        root=root,
        log_links=log_links,
    )
    return Report(
        pipeline=record.number,
        commit=record.commit,
        pr=record.pr,
        command=_command_text(record.command),
        state=record.state if record.state != "RUNNING" else analysis.state,
        gating=bool(plan.get("gating", record.gating)),
        partly_tested_reason=plan.get("partly_tested_reason"),
        started_at=record.started_at,
        finished_at=record.finished_at,
        results=results,
        analysis=analysis,
        changed_files=plan.get("changed_files"),
        slots=meta.get("slots", {}),
        reused_tests=record.reused_tests,
        host=meta.get("host", ""),
        triggered_by=meta.get("triggered_by", ""),
        ignored_results=list(meta.get("ignored_results") or []),
        local=bool(meta.get("local")),
        root=root,
    )


def _base_arguments(base) -> dict[str, Any]:
    if base is None:
        return {}
    return {
        "base": base.outcomes,
        "base_pipeline": base.pipeline,
        "flaky_history": base.flaky,
        "flaky_evidence": base.flaky_evidence,
    }


def report_from_results(folder: Path, *, pipeline: int | None = None, base=None) -> Report:
    """A Report assembled from every ``result.json`` under ``folder`` (the Actions report job),
    against ``base`` (a ``bot.base.Base``)."""
    results, logs = [], {}
    for path in sorted(folder.rglob("result.json")):
        try:
            result = StageResult.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (json.JSONDecodeError, ResultError) as error:
            raise ResultError(f"{path}: not a StageResult ({error})") from None
        results.append(result)
        stream = read_stream(path.with_name("tests.jsonl"))
        for test_id, record in stream.results.items():
            if record.get("log"):
                logs[(result.stage, test_id)] = record["log"]
    if not results:
        raise ResultError(f"{folder}: no result.json below this folder")
    analysis = analyse(results, logs=logs, **_base_arguments(base))
    starts = [r.started_at for r in results if r.started_at]
    ends = [r.finished_at for r in results if r.finished_at]
    return Report(
        pipeline=pipeline,
        commit=None,
        pr=None,
        command="(assembled from StageResult files)",
        state=analysis.state,
        gating=False,
        partly_tested_reason="assembled from result files: the plan is not known here",
        started_at=min(starts) if starts else None,
        finished_at=max(ends) if ends else None,
        results=results,
        analysis=analysis,
    )


def render_report(report: Report, fmt: str = "md", *, limit: int = COMMENT_LIMIT) -> str:
    """The report as md (at most ``limit`` characters: sections compacted, then cut with a pointer
    to the HTML report), text (the markdown without its HTML, for a terminal), html or json."""
    if fmt == "json":
        return json.dumps(_json(report), indent=2) + "\n"
    from stagebot.templates import render_template

    if fmt == "html":
        return render_template("report.html.j2", r=report, inline=html_inline, href=local_href)
    if fmt == "text":
        return plain_text(render_report(report, "md", limit=limit))
    if fmt != "md":
        raise ValueError(f"unknown report format {fmt!r}; expected md, text, html or json")
    for compact in (0, 1, 2):
        text = render_template(
            "report.md.j2",
            r=report,
            compact=compact,
            md=escape,
            code=md_code,
            url=url,
        )
        if len(text) <= limit:
            return text
    pointer = (
        "\n\n… report cut to fit GitHub's comment limit; the full report is report.html "
        "(`bot report --format html`)."
    )
    return text[: limit - len(pointer)] + pointer


def plain_text(markdown: str) -> str:
    """The markdown report as a terminal shows it best: without the HTML tags the templates
    write (the escaped text cannot hold a tag: "<" is always an entity there), with the
    entities and the zero-width spaces the escaping added turned back into the text."""
    text = TEMPLATE_TAGS.sub(lambda tag: "`" if "code" in tag.group() else "", markdown)
    text = BLANK_LINES.sub("\n\n", text)  # a tag's own line leaves a blank one
    return html.unescape(text).replace("\u200b", "")


def local_href(path: str, root: Path | None = None) -> str:
    """A link to a file of this machine (the HTML report is opened here): a file: URI of
    ``path`` (a relative one read from ``root``; without a root, a relative link); an http(s)
    address as it is."""
    from urllib.parse import quote

    if path.startswith(("https://", "http://")):
        return path
    if Path(path).is_absolute():
        return Path(path).as_uri()
    return (root / path).absolute().as_uri() if root is not None else quote(path)


def _shell_word(text: str) -> str:
    """``text`` as one shell word, in single quotes unless it holds one."""
    if "'" not in text:
        return f"'{text}'"
    if not any(c in text for c in '"$`\\!'):
        return f'"{text}"'
    return shlex.quote(text)


def html_inline(text: object) -> Markup:
    """Report text for the HTML page: escaped, `code` spans as <code>, and without the emoji
    marks (a browser without an emoji font draws boxes; the state has its own colour there)."""
    from markupsafe import Markup, escape

    plain = HEADLINE_MARKS.sub("", str(text))
    return Markup(INLINE_CODE.sub(r"<code>\1</code>", str(escape(plain))))


def reply_triggered(report: Report) -> str:
    from stagebot.templates import render_template

    return render_template("report_reply_triggered.md.j2", r=report)


def reply_completed(report: Report) -> str:
    from stagebot.templates import render_template

    return render_template("report_reply_completed.md.j2", r=report)


def md_code(text: object) -> str:
    """Inline code that survives any content: an HTML <code> with escaped text."""
    return Trusted(f"<code>{escape(text)}</code>")


def _json(report: Report) -> dict[str, Any]:
    return {
        "pipeline": report.pipeline,
        "commit": report.commit,
        "pr": report.pr,
        "command": report.command,
        "state": report.state,
        "exit_code": report.exit_code,
        "sets_status": report.sets_status,
        "status": asdict(report.status),
        "headline": report.headline(),
        "stages": [r.to_json() for r in report.results],
        "failures": [
            {**asdict(f), "mismatch": asdict(f.mismatch) if f.mismatch else None, "log": None}
            for f in report.analysis.failures
        ],
        "not_run": [{"stage": s, "why": w} for s, w in report.analysis.not_run],
        "base_pipeline": report.analysis.base_pipeline,
    }


def _command_text(command: dict[str, Any]) -> str:
    from stagebot.stages.command import Command, render

    try:
        return render(Command.from_json(command))
    except Exception:  # noqa: BLE001 - a record from another version: show it raw
        return json.dumps(command)


def _duration(seconds: float) -> str:
    seconds = float(seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"
