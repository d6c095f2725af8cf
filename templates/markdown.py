"""Escaping text a user controls (comments, file and stage names, test output) for GitHub markdown:
one rule for the bot's replies and the CI report. The markdown templates apply it to every value
by default (templates/__init__.py); ``Trusted`` marks the few fragments the bot itself built."""

from __future__ import annotations

import html
import re

MENTION = re.compile(r"@(?=[A-Za-z0-9_-])")
BACKTICKS = re.compile(r"`+")
# GitHub links bare URLs and www. names (GFM autolinks): a zero-width space breaks the pattern
AUTOLINK = re.compile(r"(?i)(?<=:)(?=//)|(?<=\bwww)(?=\.)")
LINK_SYNTAX = str.maketrans({"[": "&#91;", "]": "&#93;"})


class Trusted(str):
    """Markdown the bot built itself (escaped parts, its own markup): printed as it is."""

    __slots__ = ()


def escape(text: object, *, inline: bool = True) -> Trusted:
    """The project's one escaper for text a user controls (comments, file and stage names, test
    output) in GitHub markdown: HTML-escaped (no tags, nothing that looks like our marker: "<"
    never survives), @mentions defused with a zero-width space, "|" escaped (safe in table
    cells), "[" and "]" as entities (no links or images), bare URLs broken with a zero-width
    space (no autolinks); ``inline``: newlines become spaces. Templates call it as ``md``."""
    escaped = _escape_markup(text).translate(LINK_SYNTAX)
    escaped = AUTOLINK.sub("\u200b", escaped)
    return Trusted(escaped.replace("\n", " ") if inline else escaped)


def _escape_markup(text: object) -> str:
    escaped = html.escape(str(text), quote=False).replace("|", "&#124;")
    return MENTION.sub("@\u200b", escaped)


def code(text: object) -> Trusted:
    """User text as inline code: escaped, in a backtick fence longer than any backtick run in
    it (so it cannot close the span early). Rare characters (<, >, &, |) show as entities;
    brackets stay (a code span makes no links)."""
    inner = _escape_markup(text).replace("\n", " ")
    fence = "`" * (1 + max((len(run) for run in BACKTICKS.findall(inner)), default=0))
    pad = " " if inner.startswith("`") or inner.endswith("`") else ""
    return Trusted(f"{fence}{pad}{inner}{pad}{fence}")


def url(text: object) -> Trusted:
    """A link target the bot took from GitHub or Actions (run and comment URLs): only http(s),
    and percent-encoded so it cannot end the markdown link or open HTML; anything else is
    left out (an empty target)."""
    from urllib.parse import quote

    value = str(text)
    if not value.lower().startswith(("https://", "http://")):
        return Trusted("")
    return Trusted(quote(value, safe=":/?#=&%.-_~+@!,;"))


def block(text: object) -> Trusted:
    """Multi-line user text (a parse error quoting the comment) as a preformatted HTML block:
    escaped, newlines kept; nothing in it can end the block or become markup."""
    return Trusted(f"<pre>{escape(text, inline=False)}</pre>")
