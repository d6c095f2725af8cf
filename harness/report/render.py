"""The report as markdown (the PR comment, within GitHub's limit), text, HTML or JSON; and the
replies that carry it."""

from __future__ import annotations

import html
import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stagebot.harness.report.model import Report
from stagebot.templates.markdown import Trusted, escape, url

if TYPE_CHECKING:
    from markupsafe import Markup

COMMENT_LIMIT = 65_536
HEADLINE_MARKS = re.compile("(?:✅|❌|⚠️|⏹️|🛠️) ?")
INLINE_CODE = re.compile(r"`([^`]+)`")
BLANK_LINES = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")
TEMPLATE_TAGS = re.compile(r"</?(?:details|summary|pre|b)(?: open)?>|<code>|</code>")


def render_report(report: Report, fmt: str = "md", *, limit: int = COMMENT_LIMIT) -> str:
    """The report as md (at most ``limit`` characters: sections compacted, then cut with a pointer
    to the HTML report), text (the markdown without its HTML, for a terminal), html or json."""
    if fmt == "json":
        return json.dumps(_json(report), indent=2) + "\n"
    from stagebot.templates import render_template

    if fmt == "html":
        from stagebot.harness.analysis.classify import CATEGORIES

        return render_template(
            "report.html.j2", r=report, inline=html_inline, href=local_href, categories=CATEGORIES
        )
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
        "gpu_minutes": report.gpu_minutes(),
        "cancelled_by_fail_fast": dict(zip(("why", "stages"), report.fail_fast(), strict=True)),
    }
