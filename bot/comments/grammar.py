"""The `/bot` command language: find the one command in a PR comment and parse it.

Only a line whose first word is exactly ``/bot`` counts; fenced and indented code blocks,
``<pre>`` / ``<code>`` elements and ``>`` quotes are dropped first, so quoted or pasted commands
(which GitHub shows as code or quotes) do nothing. Each subcommand's usage, who may use it,
examples and flags are declared here, beside its parser, and the help text is rendered from these
declarations (templates/bot_help.md.j2): one source of truth.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from stagebot.stages.command import (
    RUN_FLAGS,
    RUN_FLAGS_BY_NAME,
    TEST_BACKENDS,
    Command,
    Flag,
    RunOptions,
)
from stagebot.stages.errors import CommandError
from stagebot.stages.suggest import excerpt, unknown

# Linear on any line: one unbounded repeat after the literal (a lazy `.*?` before `[ \t]*$`
# backtracks quadratically on long runs of blanks); the arguments' blanks are stripped after.
BOT_LINE = re.compile(r"^[ \t]*/bot(?:[ \t](?P<args>.*))?$")
# CommonMark: a fence closes on the same character, at least as long, with nothing after it.
FENCE = re.compile(r"^[ \t]{0,3}(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
QUOTE = re.compile(r"^[ \t]*>")
INDENTED_CODE = re.compile(r"^(?: {4}| {0,3}\t)")  # 4 columns: GitHub shows code (or plain text)
# an HTML element GitHub shows as code or raw text: nothing inside it is a command
HTML_CODE = re.compile(r"<(?P<tag>pre|code|textarea)(?=[\s>/]|$)", re.IGNORECASE)
PIPELINE_ID = re.compile(r"^#?(?P<id>[0-9]+)$")
TYPOGRAPHIC_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"})
HELP_FLAGS = ("-h", "--help")
# Markdown breaks lines only here (str.splitlines also splits on U+2028 and friends, which GitHub
# renders inside one line, so a "quoted" command could run).
LINE_BREAK = re.compile(r"\r\n|\r|\n")
HTML_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)  # invisible on GitHub
LIST_ITEM = re.compile(r"^[A-Za-z0-9_*][A-Za-z0-9_*.-]*$")
# One piece of a shell word (shlex.split's POSIX rules); shlex itself grows each token a character
# at a time, quadratic on a long token, so the /bot line is split with this instead.
WORD_PIECE = re.compile(
    r"(?P<plain>[^ \t\r\n\"'\\]+)|\\(?P<escaped>.)|\"(?P<double>(?:[^\"\\]|\\.)*)\""
    r"|'(?P<single>[^']*)'|(?P<blank>[ \t\r\n]+)",
    re.DOTALL,
)
DOUBLE_QUOTED_ESCAPE = re.compile(r'\\(["\\])')
SHA_DIGITS = 40  # a full SHA-1; a shorter prefix is refused with the head named (sha_pin.py)
SHA_HEX = re.compile(r"^[0-9a-f]+$")


@dataclass(frozen=True)
class Subcommand:
    name: str
    usage: str
    summary: str
    who_can_use: str
    examples: tuple[str, ...]
    parse: Callable[[list[str]], Command]
    flags: tuple[Flag, ...] = ()
    dangerous: bool = False


SHA_FLAG = Flag(
    "--sha",
    "sha",
    f"The full SHA ({SHA_DIGITS} hex digits) of the PR head commit you reviewed: the command "
    "is refused when the head is another commit, and a shorter prefix is refused (a second "
    "commit can be made to share it). Needed by skip and reuse-pipeline, and by run on PRs "
    "whose author lacks write permission.",
    "SHA",
)
CONTRADICTIONS = (
    ("--reuse-test", "--disable-reuse-test"),
    ("--only-multi-gpu-test", "--disable-multi-gpu-test"),
    ("--only-multi-gpu-test", "--add-multi-gpu-test"),
    ("--add-multi-gpu-test", "--disable-multi-gpu-test"),
    ("--stage-list", "--extra-stage"),
)


def _parse_run(args: list[str]) -> Command:
    given: dict[str, object] = {}
    i = 0
    while i < len(args):
        name, _, inline = args[i].partition("=")
        if name in HELP_FLAGS:
            return Command("help")
        flag = RUN_FLAGS_BY_NAME.get(name)
        if flag is None:
            raise CommandError(unknown("run flag", args[i], RUN_FLAGS_BY_NAME) + _usage_hint("run"))
        if flag.name in given:
            raise CommandError(f"{flag.name} is given twice; give it once")
        value: object
        if flag.kind == "bool":
            if inline:
                raise CommandError(f"{flag.name} takes no value (got {excerpt(inline)})")
            value = True
        elif flag.kind == "list":
            if inline:
                raw = inline
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                i += 1
                raw = args[i]
            else:
                raise CommandError(f"{flag.name} needs a value, e.g. {flag.name} {flag.metavar}")
            value = _split_list(flag, raw)
        else:  # optional pipeline id
            raw = inline or (
                args[i + 1] if i + 1 < len(args) and PIPELINE_ID.match(args[i + 1]) else ""
            )
            if raw and not inline:
                i += 1
            value = _pipeline_id(flag.name, raw) if raw else "latest"
        given[flag.name] = value
        i += 1
    _check_contradictions(given)
    options = RunOptions(**{RUN_FLAGS_BY_NAME[name].field: value for name, value in given.items()})
    if options.debug and (len(options.stage_list) != 1 or "*" in options.stage_list[0]):
        raise CommandError(
            "--debug needs exactly one stage in --stage-list, e.g. "
            '--debug --stage-list "DGX_H200-4_GPUs-AutoDeploy-1"'
        )
    return Command("run", run=options)


def _split_list(flag: Flag, raw: str) -> tuple[str, ...]:
    items = tuple(item.strip() for item in raw.split(","))
    if not all(items):
        raise CommandError(f"{flag.name} has an empty item in {excerpt(raw)}; write {flag.metavar}")
    if flag.name == "--test-backend":
        items = tuple(item.lower() for item in items)
        for item in items:
            if item not in TEST_BACKENDS:
                raise CommandError(unknown("test backend", item, TEST_BACKENDS))
    for item in items:
        if not LIST_ITEM.match(item):
            raise CommandError(
                f"{flag.name} item {excerpt(item)} is not a name (letters, digits, _ . - and * "
                f"wildcards, not starting with -); write {flag.metavar}"
            )
    return items


def _check_contradictions(given: dict[str, object]) -> None:
    for first, second in CONTRADICTIONS:
        if first in given and second in given:
            raise CommandError(f"{first} and {second} contradict each other; give only one")


def _pipeline_id(where: str, raw: str) -> int:
    match = PIPELINE_ID.match(raw)
    if not match:
        raise CommandError(
            f"{where} takes a pipeline id such as 47634 or #47634, not {excerpt(raw)}"
        )
    return int(match["id"])


def _parse_kill(args: list[str]) -> Command:
    if args:
        raise CommandError(
            f"kill takes no arguments (got {excerpt(' '.join(args))}); write /bot kill"
        )
    return Command("kill")


def _parse_skip(args: list[str]) -> Command:
    if (
        len(args) == 2
        and args[0] == "--comment"
        or len(args) == 1
        and args[0].startswith("--comment=")
    ):
        reason = args[1] if len(args) == 2 else args[0].partition("=")[2]
        if reason.strip():
            return Command("skip", comment=reason.strip())
    raise CommandError('skip needs a reason: /bot skip --comment "why testing can be skipped"')


def _parse_reuse_pipeline(args: list[str]) -> Command:
    if len(args) > 1:
        raise CommandError(
            f"reuse-pipeline takes at most one pipeline id (got {excerpt(' '.join(args))}); "
            "write /bot reuse-pipeline [#N]"
        )
    return Command(
        "reuse-pipeline", pipeline_id=_pipeline_id("reuse-pipeline", args[0]) if args else None
    )


def _parse_help(args: list[str]) -> Command:
    return Command("help")


SUBCOMMANDS: dict[str, Subcommand] = {
    spec.name: spec
    for spec in (
        Subcommand(
            "run",
            "/bot run [--sha SHA] [flags]",
            "Plan and run the stages for the PR's head commit, then post one report. By default "
            "it reuses tests that already passed on this commit.",
            "anyone with write permission; --post-merge, --add-multi-gpu-test and "
            "--only-multi-gpu-test also need the approval label; on a PR whose author lacks "
            "write permission, --sha is required",
            (
                "/bot run",
                "/bot run --sha 1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b",
                "/bot run --disable-fail-fast",
                '/bot run --stage-list "DGX_H200-4_GPUs-AutoDeploy-1"',
                '/bot run --extra-stage "DGX_B200-4_GPUs-AutoDeploy-1"',
            ),
            _parse_run,
            (SHA_FLAG, *RUN_FLAGS),
        ),
        Subcommand(
            "kill",
            "/bot kill",
            "Stop every running pipeline of this PR.",
            "anyone with write permission",
            ("/bot kill",),
            _parse_kill,
        ),
        Subcommand(
            "skip",
            '/bot skip --sha SHA --comment "REASON"',
            "Mark the PR's head commit, which --sha names, as passing without testing it.",
            "maintainers and admins",
            (
                "/bot skip --sha 1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b "
                '--comment "docs-only change"',
            ),
            _parse_skip,
            (SHA_FLAG,),
            dangerous=True,
        ),
        Subcommand(
            "reuse-pipeline",
            "/bot reuse-pipeline --sha SHA [#N]",
            "Validate the head commit, which --sha names, with the result of pipeline N "
            "(default: the latest), and stop running pipelines.",
            "maintainers and admins",
            (
                "/bot reuse-pipeline --sha 1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b",
                "/bot reuse-pipeline --sha 1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b #47634",
            ),
            _parse_reuse_pipeline,
            (SHA_FLAG,),
            dangerous=True,
        ),
        Subcommand(
            "help",
            "/bot help",
            "Show this help.",
            "anyone",
            ("/bot help", "/bot --help"),
            _parse_help,
        ),
    )
}


def split_words(line: str) -> list[str]:
    """``shlex.split(line)`` in linear time: blanks separate words, quotes group them, a
    backslash escapes the next character (in double quotes only ``"`` and ``\\``)."""
    words: list[str] = []
    pieces: list[str] | None = None  # the word being read (None: between words)
    position = 0
    while position < len(line):
        match = WORD_PIECE.match(line, position)
        if match is None:  # an unclosed quote, or a backslash at the very end
            rest = line[position:]
            trailing = len(rest) - len(rest.rstrip("\\"))
            cut_escape = rest[0] == "\\" or (rest[0] == '"' and trailing % 2 == 1)
            raise ValueError("No escaped character" if cut_escape else "No closing quotation")
        position = match.end()
        if match["blank"] is not None:
            if pieces is not None:
                words.append("".join(pieces))
            pieces = None
            continue
        if match["double"] is not None:
            piece = DOUBLE_QUOTED_ESCAPE.sub(r"\1", match["double"])
        else:
            piece = next(p for p in match.group("plain", "escaped", "single") if p is not None)
        pieces = pieces if pieces is not None else []
        pieces.append(piece)
    if pieces is not None:
        words.append("".join(pieces))
    return words


def find_command_line(comment: str) -> tuple[int, str] | None:
    """Return (1-based line number, arguments) of the comment's one `/bot` line, or None."""
    found: list[tuple[int, str]] = []
    fence: str | None = None
    element: str | None = None  # an open <pre>, <code> or <textarea>
    visible = HTML_COMMENT.sub(lambda hidden: "\n" * hidden[0].count("\n"), comment)
    for number, line in enumerate(LINE_BREAK.split(visible), start=1):
        opening = FENCE.match(line)
        if fence is not None:
            closing = opening and not opening["info"].strip()
            if closing and opening["fence"][0] == fence[0] and len(opening["fence"]) >= len(fence):
                fence = None
            continue
        if opening:
            fence = opening["fence"]
            continue
        if element is not None:
            if _closes(element, line):
                element = None
            continue
        tag = HTML_CODE.search(line)
        if tag and not _closes(tag["tag"], line[tag.end() :]):
            element = tag["tag"]
            continue
        if QUOTE.match(line) or INDENTED_CODE.match(line):
            continue
        match = BOT_LINE.match(line)
        if match:
            found.append((number, (match["args"] or "").strip(" \t")))
    if len(found) > 1:
        numbers = [str(number) for number, _ in found[:5]]
        lines = " and ".join(numbers) if len(found) <= 5 else f"{', '.join(numbers)}, …"
        raise CommandError(
            f"found {len(found)} /bot commands (lines {lines}); put one command per comment"
        )
    return found[0] if found else None


def _closes(tag: str, text: str) -> bool:
    return re.search(rf"</{tag}\s*>", text, re.IGNORECASE) is not None


def parse_comment(comment: str) -> Command:
    """Parse a whole PR comment; a comment without a `/bot` line gives ``Command(None)``."""
    located = find_command_line(comment)
    if located is None:
        return Command(None)
    number, raw = located
    try:
        args = split_words(raw.translate(TYPOGRAPHIC_QUOTES))
    except ValueError as error:
        raise CommandError(f"cannot split the /bot line on line {number}: {error}") from None
    if not args:
        raise CommandError("the /bot line names no command\n\n" + help_text())
    name, rest = args[0], args[1:]
    if name in HELP_FLAGS:
        name, rest = "help", []
    spec = SUBCOMMANDS.get(name)
    if spec is None:
        raise CommandError(unknown("command", name, SUBCOMMANDS) + "\n\n" + help_text())
    if rest[:1] in (
        [flag] for flag in HELP_FLAGS
    ):  # `/bot run --help` (run also checks later flags)
        spec = SUBCOMMANDS["help"]
    sha, rest = _take_sha(rest) if SHA_FLAG in spec.flags else (None, rest)
    return replace(spec.parse(rest), line=number, sha=sha)


def _take_sha(args: list[str]) -> tuple[str | None, list[str]]:
    """Take ``--sha SHA`` (or ``--sha=PREFIX``) out of the arguments; check the prefix."""
    found = [i for i, arg in enumerate(args) if arg == "--sha" or arg.startswith("--sha=")]
    if not found:
        return None, args
    if len(found) > 1:
        raise CommandError("--sha is given twice; give it once")
    i = found[0]
    name, _, inline = args[i].partition("=")
    if inline or name != args[i]:
        value, rest = inline, args[:i] + args[i + 1 :]
    elif i + 1 < len(args) and not args[i + 1].startswith("--"):
        value, rest = args[i + 1], args[:i] + args[i + 2 :]
    else:
        raise CommandError(
            "--sha needs the head commit's SHA, e.g. --sha 1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b"
        )
    sha = value.lower()
    if not SHA_HEX.match(sha):
        raise CommandError(
            f"--sha {value!r} is not hexadecimal; give the full {SHA_DIGITS}-hex SHA of the "
            "commit you reviewed, which the bot's replies show"
        )
    if len(sha) > SHA_DIGITS:
        raise CommandError(
            f"--sha {value!r} has {len(sha)} digits; a commit's SHA has {SHA_DIGITS}: give the "
            "full SHA of the commit you reviewed, which the bot's replies show"
        )
    return sha, rest


def help_text() -> str:
    from stagebot.templates import render_template
    from stagebot.templates.markdown import Trusted, code

    text = render_template("bot_help.md.j2", subcommands=list(SUBCOMMANDS.values()), code=code)
    return Trusted(text)


def _usage_hint(name: str) -> str:
    return f"\nusage: {SUBCOMMANDS[name].usage}; see /bot help"


NEAR_MISS = re.compile(r"^[ \t]*(?P<word>/?[A-Za-z]{2,6})(?:[ \t](?P<rest>.*))?$")


def near_miss(comment: str) -> str | None:
    """The did-you-mean for a line that was meant as a command but is not one (`/Bot run`,
    `/bto run`, `bot run` without the slash: a near `/bot` followed by a subcommand); None
    when no line is."""
    import difflib

    for number, line in enumerate(LINE_BREAK.split(comment), start=1):
        match = NEAR_MISS.match(line)
        if match is None or match["word"] == "/bot":
            continue
        word, rest = match["word"], (match["rest"] or "").strip(" \t")
        if not rest or rest.split()[0] not in SUBCOMMANDS:
            continue
        typed = word.lower()  # /Bot; /bto (swapped); /bo, /bott (a letter dropped or doubled)
        near = sorted(typed) == sorted("/bot") or (
            difflib.SequenceMatcher(None, typed, "/bot").ratio() >= 0.85
        )
        if typed == "bot" or (word.startswith("/") and near):
            written = line.strip(" \t")
            return (
                f"line {number}: {excerpt(written)} is not a command (only a line "
                f"whose first word is exactly /bot is); did you mean {excerpt('/bot ' + rest)}?"
            )
    return None
