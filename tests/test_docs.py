"""The documents hold together: every relative link in the repository's Markdown (README.md,
SECURITY.md, DEVELOPERS.md, docs/, the suites' and kernels' notes) points at a file of the
repository and, with a #fragment, at a heading of that file; every `bot NAME` and `/bot NAME`
they show in code is a command that exists."""

from __future__ import annotations

import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest
from markdown_it import MarkdownIt

from stagebot.bot.cli.main import COMMANDS
from stagebot.bot.cli.reference import github_anchor
from stagebot.bot.comments.grammar import SUBCOMMANDS

ROOT = Path(__file__).resolve().parents[1]
# Every Markdown file of the repository but the fixtures' (user repositories the tests run), and
# docs/ whether committed yet or not.
TRACKED = subprocess.run(
    ["git", "ls-files", "-z", "--", "*.md", ":!tests/fixtures"],
    cwd=ROOT, capture_output=True, check=True, text=True,
).stdout.split("\0")  # fmt: skip
DOCUMENTS = sorted({*(ROOT / name for name in TRACKED if name), *(ROOT / "docs").glob("*.md")})
PARSER = MarkdownIt("commonmark").enable("table")


def _inline(text: str):
    for token in PARSER.parse(text):
        yield from token.children or ()


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown text (a repeated one gets -1, -2…)."""
    found: set[str] = set()
    tokens = PARSER.parse(text)
    for heading, inline in zip(tokens, tokens[1:], strict=False):
        if heading.type == "heading_open":
            words = "".join(child.content for child in inline.children or ())
            anchor, n = github_anchor(words), 0
            while (unique := anchor if n == 0 else f"{anchor}-{n}") in found:
                n += 1
            found.add(unique)
    return found


def broken_links(path: Path, text: str) -> list[str]:
    """Each relative link of ``text`` (the document at ``path``) that points at no file of the
    repository, or at a heading its target lacks."""
    broken = []
    for token in _inline(text):
        if token.type != "link_open":
            continue
        href = token.attrs["href"]
        if href.startswith(("https://", "http://", "mailto:")):
            continue
        target, _, fragment = unquote(href).partition("#")
        file = (path.parent / target).resolve()
        if target and (not file.is_relative_to(ROOT) or not file.exists()):
            broken.append(f"{href}: no such file")
            continue
        headings = anchors(file.read_text(encoding="utf-8") if target else text)
        if fragment and fragment not in headings:
            where = file.relative_to(ROOT) if target else path.relative_to(ROOT)
            broken.append(f"{href}: {where} has no heading #{fragment}")
    return broken


def unknown_commands(text: str) -> list[str]:
    """`bot NAME …` and `/bot NAME …` code spans whose NAME is no command."""
    unknown = []
    for token in _inline(text):
        if token.type != "code_inline":
            continue
        words = token.content.split()
        if len(words) < 2 or words[1].startswith("-"):
            continue
        if (words[0] == "bot" and words[1] not in COMMANDS) or (
            words[0] == "/bot" and words[1] not in SUBCOMMANDS and not words[1].startswith("<")
        ):
            unknown.append(token.content)
    return unknown


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken_links(path, path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_shown_exists(path: Path) -> None:
    assert unknown_commands(path.read_text(encoding="utf-8")) == []


def test_the_readme_links_every_document_of_the_manual() -> None:
    names = {str(path.relative_to(ROOT)) for path in DOCUMENTS}
    assert {"README.md", "SECURITY.md", "docs/reference.md", "kernels/cute/NOTES.md"} <= names
    manual = {name for name in names if name.startswith("docs/")} | {"SECURITY.md", "DEVELOPERS.md"}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = {t.attrs["href"].partition("#")[0] for t in _inline(readme) if t.type == "link_open"}
    assert sorted(manual - linked) == [], "the README's Documentation section does not link these"


def test_a_broken_link_and_a_missing_heading_are_caught() -> None:
    """The negative control: a link to a missing file, to a missing heading of another file and
    of this one, and one leaving the repository; the good links pass."""
    text = (
        "# Title\n\n## Two words\n\n"
        "[a](running.md) [b](nowhere.md) [c](running.md#no-such-heading) [d](#two-words) "
        "[e](#missing) [f](../../outside.md) [g](https://example.com/x.md) "
        "[h](github.md#the-bots-github-app)\n\n| x |\n|---|\n| [i](gone.md) |\n"
    )
    assert broken_links(ROOT / "docs" / "example.md", text) == [
        "nowhere.md: no such file",
        "running.md#no-such-heading: docs/running.md has no heading #no-such-heading",
        "#missing: docs/example.md has no heading #missing",
        "../../outside.md: no such file",
        "gone.md: no such file",
    ]


def test_repeated_headings_get_numbered_anchors() -> None:
    assert anchors("# A\n\n## Notes\n\n## Notes\n\n### `bot run`\n") == {
        "a", "notes", "notes-1", "bot-run"
    }  # fmt: skip


def test_an_unknown_command_is_caught() -> None:
    text = "`bot run COMMENT`, `bot frobnicate`, `/bot kill`, `/bot merge`, `bot --help`, `/bot`\n"
    assert unknown_commands(text) == ["bot frobnicate", "/bot merge"]
