"""Escaping text a user controls (comments, file and stage names, test output) for GitHub markdown:
one rule for the bot's replies and the CI report. The markdown templates apply it to every value
by default (templates/__init__.py); ``Trusted`` marks the few fragments the bot itself built."""

from __future__ import annotations

import html
import re

# Every line break a renderer may honour (CommonMark takes \r and \r\n; browsers and editors
# U+2028/2029/0085; \v and \f end lines in some): made one "\n" first, so inline text has none
LINE_BREAK = re.compile(r"\r\n?|[\u2028\u2029\u0085\v\f]")
# bidi overrides and isolates, zero-width characters and marks: shown as <U+XXXX>, never hidden
INVISIBLE = re.compile(r"[\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")
# GitHub links #12, GH-12, owner/repo#12 (and a closing keyword before one closes the issue when
# it reaches a PR body or commit): a zero-width space after "#" / "GH-" and inside such a keyword
REFERENCE = re.compile(r"(?i)(#|(?<![\w-])GH-)(?=\d)")
CLOSING_KEYWORD = re.compile(
    r"(?i)\b(?=(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?):?\s+(?:[\w.-]+/[\w.-]+)?(?:#|GH-)\d)(\w)"
)
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
    output) in GitHub markdown: every line break (\r, \r\n, U+2028/2029/0085, \v, \f) made
    "\n"; bidi and zero-width controls shown as ``<U+202E>``; HTML-escaped (no tags, nothing that
    looks like our marker: "<" never survives), @mentions, issue references (#12, GH-12,
    owner/repo#12) and closing keywords defused with a zero-width space, "|" escaped (safe in
    table cells), "[" and "]" as entities (no links or images), bare URLs broken with a
    zero-width space (no autolinks); ``inline``: newlines become spaces. Templates call it as
    ``md``; ``code`` and ``block`` use the same rules."""
    escaped = _escape_markup(text).translate(LINK_SYNTAX)
    escaped = AUTOLINK.sub("\u200b", escaped)
    return Trusted(escaped.replace("\n", " ") if inline else escaped)


def _escape_markup(text: object) -> str:
    plain = LINE_BREAK.sub("\n", str(text))
    plain = INVISIBLE.sub(lambda m: f"<U+{ord(m[0]):04X}>", plain)
    plain = REFERENCE.sub("\\1\u200b", CLOSING_KEYWORD.sub("\\1\u200b", plain))
    escaped = html.escape(plain, quote=False).replace("|", "&#124;")
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
