"""Escaping text a user controls (comments, file and stage names, test output) for GitHub markdown:
one rule for the bot's replies and the CI report."""

from __future__ import annotations

import html
import re

MENTION = re.compile(r"@(?=[A-Za-z0-9_-])")
BACKTICKS = re.compile(r"`+")


def escape(text: object, *, inline: bool = True) -> str:
    """The project's one escaper for text a user controls (comments, file and stage names, test
    output) in GitHub markdown: HTML-escaped (no tags, nothing that looks like our marker: "<"
    never survives), @mentions defused with a zero-width space, "|" escaped (safe in table
    cells); ``inline``: newlines become spaces. The reply and report templates call it as ``md``."""
    escaped = html.escape(str(text), quote=False).replace("|", "&#124;")
    escaped = MENTION.sub("@\u200b", escaped)
    return escaped.replace("\n", " ") if inline else escaped


def code(text: object) -> str:
    """User text as inline code: escaped, in a backtick fence longer than any backtick run in
    it (so it cannot close the span early). Rare characters (<, >, &, |) show as entities."""
    inner = escape(text)
    fence = "`" * (1 + max((len(run) for run in BACKTICKS.findall(inner)), default=0))
    pad = " " if inner.startswith("`") or inner.endswith("`") else ""
    return f"{fence}{pad}{inner}{pad}{fence}"


def block(text: object) -> str:
    """Multi-line user text (a parse error quoting the comment) as a preformatted HTML block:
    escaped, newlines kept; nothing in it can end the block or become markup."""
    return f"<pre>{escape(text, inline=False)}</pre>"
