"""The /bot command language: a table of comments and what they parse to, near-misses included."""

from __future__ import annotations

import re
import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stagebot.bot.comments import grammar
from stagebot.bot.comments.grammar import help_text, parse_comment
from stagebot.stages.command import RUN_FLAGS, TEST_BACKENDS, Command, RunOptions, render
from stagebot.stages.errors import CommandError


def run(**options) -> Command:
    return Command("run", run=RunOptions(**options))


PARSES = [
    pytest.param("/bot run", run(), id="plain run"),
    pytest.param("  /bot run  ", run(), id="leading and trailing whitespace"),
    pytest.param("Looks good.\n\n/bot run\nthanks", run(), id="command among prose"),
    pytest.param("/bot kill", Command("kill"), id="kill"),
    pytest.param(
        '/bot skip --comment "docs only"',
        Command("skip", comment="docs only"),
        id="skip with a reason",
    ),
    pytest.param(
        "/bot skip --comment=typo-fix",
        Command("skip", comment="typo-fix"),
        id="skip with --comment=",
    ),
    pytest.param("/bot reuse-pipeline", Command("reuse-pipeline"), id="reuse-pipeline latest"),
    pytest.param(
        "/bot reuse-pipeline 47634",
        Command("reuse-pipeline", pipeline_id=47634),
        id="reuse-pipeline id",
    ),
    pytest.param(
        "/bot reuse-pipeline #47634",
        Command("reuse-pipeline", pipeline_id=47634),
        id="reuse-pipeline #id",
    ),
    pytest.param("/bot help", Command("help"), id="help"),
    pytest.param("/bot -h", Command("help"), id="-h"),
    pytest.param("/bot --help", Command("help"), id="--help"),
    pytest.param("/bot run --help", Command("help"), id="run --help gives help"),
    pytest.param("/bot run --disable-fail-fast -h", Command("help"), id="help flag after a flag"),
    pytest.param("/bot kill --help", Command("help"), id="kill --help gives help"),
    pytest.param(
        "/bot skip --comment -h",
        Command("skip", comment="-h"),
        id="a help flag as a value is a value",
    ),
    pytest.param("<!-- hidden -->\n/bot kill", Command("kill"), id="HTML comment before a command"),
    pytest.param("/bot run --reuse-test", run(reuse_test="latest"), id="--reuse-test bare"),
    pytest.param("/bot run --reuse-test 12", run(reuse_test=12), id="--reuse-test N"),
    pytest.param("/bot run --reuse-test #12", run(reuse_test=12), id="--reuse-test #N"),
    pytest.param(
        "/bot run --reuse-test --disable-fail-fast",
        run(reuse_test="latest", disable_fail_fast=True),
        id="--reuse-test bare then another flag",
    ),
    pytest.param(
        "/bot run --disable-reuse-test", run(disable_reuse_test=True), id="--disable-reuse-test"
    ),
    pytest.param(
        "/bot run --disable-fail-fast", run(disable_fail_fast=True), id="--disable-fail-fast"
    ),
    pytest.param("/bot run --skip-test", run(skip_test=True), id="--skip-test"),
    pytest.param(
        "/bot run --disable-fail-fast --reuse-test",
        run(reuse_test="latest", disable_fail_fast=True),
        id="--reuse-test last, without an id",
    ),
    pytest.param(
        '/bot run --stage-list "A10-PyTorch-1, DGX_H200-4_GPUs-AutoDeploy-1"',
        run(stage_list=("A10-PyTorch-1", "DGX_H200-4_GPUs-AutoDeploy-1")),
        id="--stage-list with spaces after commas",
    ),
    pytest.param(
        "/bot run --stage-list A10-PyTorch-1,A30-AutoDeploy-1",
        run(stage_list=("A10-PyTorch-1", "A30-AutoDeploy-1")),
        id="--stage-list unquoted",
    ),
    pytest.param("/bot run --stage-list=A10-*", run(stage_list=("A10-*",)), id="--stage-list="),
    pytest.param(
        "/bot run --stage-list \u201cA10-PyTorch-1, A30-AutoDeploy-1\u201d",
        run(stage_list=("A10-PyTorch-1", "A30-AutoDeploy-1")),
        id="typographic double quotes",
    ),
    pytest.param(
        "/bot run --stage-list \u2018A10-PyTorch-1\u2019",
        run(stage_list=("A10-PyTorch-1",)),
        id="typographic single quotes",
    ),
    pytest.param(
        '/bot run --gpu-type "A30, H100_PCIe"', run(gpu_type=("A30", "H100_PCIe")), id="--gpu-type"
    ),
    pytest.param(
        '/bot run --test-backend "PyTorch, cpp"',
        run(test_backend=("pytorch", "cpp")),
        id="--test-backend case-insensitive",
    ),
    pytest.param(
        "/bot run --add-multi-gpu-test", run(add_multi_gpu_test=True), id="--add-multi-gpu-test"
    ),
    pytest.param(
        "/bot run --only-multi-gpu-test", run(only_multi_gpu_test=True), id="--only-multi-gpu-test"
    ),
    pytest.param(
        "/bot run --disable-multi-gpu-test",
        run(disable_multi_gpu_test=True),
        id="--disable-multi-gpu-test",
    ),
    pytest.param("/bot run --post-merge", run(post_merge=True), id="--post-merge"),
    pytest.param(
        '/bot run --extra-stage "H100_PCIe-PyTorch-1"',
        run(extra_stage=("H100_PCIe-PyTorch-1",)),
        id="--extra-stage",
    ),
    pytest.param("/bot run --detailed-log", run(detailed_log=True), id="--detailed-log"),
    pytest.param(
        '/bot run --debug --stage-list "A10-PyTorch-1"',
        run(debug=True, stage_list=("A10-PyTorch-1",)),
        id="--debug with one stage",
    ),
    pytest.param(
        "```\n/bot run\n```\n/bot kill",
        Command("kill"),
        id="fenced command ignored, real one counts",
    ),
    pytest.param(
        "~~~~\n/bot run\n~~~\n/bot kill\n~~~~\n/bot help",
        Command("help"),
        id="tilde fence closes only on a long enough fence",
    ),
    pytest.param(
        "```\n/bot run\n`````\n/bot kill",
        Command("kill"),
        id="a longer fence closes a shorter one",
    ),
    pytest.param(
        "```\n~~~\n/bot run\n```\n/bot kill",
        Command("kill"),
        id="a tilde fence does not close a backtick fence",
    ),
    pytest.param(
        "   ```\n/bot run\n   ```\n/bot kill",
        Command("kill"),
        id="a fence indented three spaces still fences",
    ),
    pytest.param("    ```\n/bot kill", Command("kill"), id="four spaces of indent make no fence"),
    pytest.param("``\n/bot kill\n``", Command("kill"), id="two backticks make no fence"),
    pytest.param("~~\n/bot kill\n~~", Command("kill"), id="two tildes make no fence"),
    pytest.param(
        "~~~\n```\n/bot run\n~~~\n/bot kill",
        Command("kill"),
        id="a backtick fence does not close a tilde fence",
    ),
    pytest.param("> /bot run\n/bot kill", Command("kill"), id="quoted command ignored"),
    pytest.param("  > > /bot run\n/bot kill", Command("kill"), id="nested quote ignored"),
]


@pytest.mark.parametrize(("comment", "expected"), PARSES)
def test_parses(comment: str, expected: Command) -> None:
    assert parse_comment(comment) == expected


def test_every_run_flag_has_a_parse_case() -> None:
    covered = " ".join(str(p.values[0]) for p in PARSES)
    assert [flag.name for flag in RUN_FLAGS if flag.name not in covered] == []


NO_COMMAND = [
    pytest.param("", id="empty"),
    pytest.param("LGTM, thanks!", id="prose"),
    pytest.param("/botany is a science", id="/botany"),
    pytest.param("/bots run", id="/bots"),
    pytest.param("please /bot run", id="/bot not first word"),
    pytest.param("> /bot run", id="quoted reply"),
    pytest.param("```\n/bot run\n```", id="fenced code block"),
    pytest.param("```python\n/bot run\n", id="unclosed fence swallows the rest"),
    pytest.param("```\n/bot run\n``", id="two backticks close no fence"),
    pytest.param(
        "````\n```\n/bot run\n````", id="a shorter fence inside a longer one closes nothing"
    ),
    pytest.param("```\n```python\n/bot run\n```", id="a fence with an info string closes nothing"),
    pytest.param("`/bot run`", id="inline code"),
    pytest.param("\\/bot run", id="escaped"),
    pytest.param("> quoted\u2028/bot kill", id="U+2028 is no line break on GitHub"),
    pytest.param("hello\u2029/bot run", id="U+2029 is no line break on GitHub"),
    pytest.param("note\x0b/bot run\x0c", id="vertical tab and form feed are no line breaks"),
    pytest.param("<!--\n/bot run\n-->", id="inside an HTML comment"),
    pytest.param("<!-- never closed\n/bot run", id="inside an unclosed HTML comment"),
]


@pytest.mark.parametrize("comment", NO_COMMAND)
def test_no_command(comment: str) -> None:
    assert parse_comment(comment) == Command(None)
    assert parse_comment(comment).to_json() == {"version": 1, "command": None, "options": {}}


ERRORS = [
    pytest.param("/bot run\n/bot kill", "found 2 /bot commands (lines 1 and 2)", id="two commands"),
    pytest.param("/bot", "names no command", id="bare /bot"),
    pytest.param("/bot deploy", "unknown command 'deploy'", id="unknown subcommand"),
    pytest.param(
        "/bot deploy --help", "unknown command 'deploy'", id="unknown subcommand asking for help"
    ),
    pytest.param(
        "/bot run --stage-list=--x",
        "--stage-list item '--x' is not a name",
        id="list item that looks like a flag",
    ),
    pytest.param(
        '/bot run --gpu-type "A30;rm"',
        "--gpu-type item 'A30;rm' is not a name",
        id="list item with odd characters",
    ),
    pytest.param("/bot rnu", "did you mean 'run'", id="subcommand typo"),
    pytest.param("/bot run --stage-lst A", "did you mean '--stage-list'", id="flag typo"),
    pytest.param("/bot run --fast", "unknown run flag '--fast'", id="unknown flag"),
    pytest.param("/bot run extra", "unknown run flag 'extra'", id="stray word"),
    pytest.param("/bot run --stage-list", "--stage-list needs a value", id="list without value"),
    pytest.param(
        "/bot run --stage-list --post-merge",
        "--stage-list needs a value",
        id="list followed by a flag",
    ),
    pytest.param('/bot run --stage-list "A,,B"', "empty item", id="empty list item"),
    pytest.param("/bot run --post-merge --post-merge", "given twice", id="repeated flag"),
    pytest.param("/bot run --post-merge=yes", "takes no value", id="value on a boolean"),
    pytest.param("/bot run --reuse-test=abc", "pipeline id such as 47634", id="bad pipeline id"),
    pytest.param(
        '/bot run --test-backend "pytorch, jax"', "unknown test backend 'jax'", id="unknown backend"
    ),
    pytest.param(
        "/bot run --reuse-test --disable-reuse-test",
        "--reuse-test and --disable-reuse-test contradict",
        id="reuse contradiction",
    ),
    pytest.param(
        "/bot run --only-multi-gpu-test --disable-multi-gpu-test",
        "--only-multi-gpu-test and --disable-multi-gpu-test contradict",
        id="only vs disable multi-gpu",
    ),
    pytest.param(
        "/bot run --add-multi-gpu-test --only-multi-gpu-test",
        "--only-multi-gpu-test and --add-multi-gpu-test contradict",
        id="only vs add multi-gpu",
    ),
    pytest.param(
        "/bot run --stage-list A --extra-stage B",
        "--stage-list and --extra-stage contradict",
        id="stage-list vs extra-stage",
    ),
    pytest.param("/bot run --debug", "--debug needs exactly one stage", id="debug without stage"),
    pytest.param(
        '/bot run --debug --stage-list "A, B"',
        "--debug needs exactly one stage",
        id="debug with two stages",
    ),
    pytest.param(
        '/bot run --debug --stage-list "A10-*"',
        "--debug needs exactly one stage",
        id="debug with a wildcard",
    ),
    pytest.param("/bot skip", "skip needs a reason", id="skip without comment"),
    pytest.param('/bot skip --comment "  "', "skip needs a reason", id="skip with blank comment"),
    pytest.param("/bot skip because", "skip needs a reason", id="skip without --comment"),
    pytest.param(
        "/bot skip --comment=why extra", "skip needs a reason", id="skip --comment= and more"
    ),
    pytest.param(
        "/bot run --disable-fail-fast --stage-list",
        "--stage-list needs a value",
        id="a list flag last, without its value",
    ),
    pytest.param("/bot kill now", "kill takes no arguments", id="kill with arguments"),
    pytest.param("/bot reuse-pipeline 1 2", "at most one pipeline id", id="reuse two ids"),
    pytest.param("/bot reuse-pipeline last", "pipeline id such as 47634", id="reuse bad id"),
    pytest.param(
        '/bot run --stage-list "A10', "cannot split the /bot line on line 1", id="unclosed quote"
    ),
]


@pytest.mark.parametrize(("comment", "message"), ERRORS)
def test_errors(comment: str, message: str) -> None:
    with pytest.raises(CommandError) as raised:
        parse_comment(comment)
    assert message in str(raised.value)


def test_unknown_subcommand_includes_help() -> None:
    with pytest.raises(CommandError) as raised:
        parse_comment("/bot deploy")
    assert help_text() in str(raised.value)


def test_help_is_rendered_from_the_declarations() -> None:
    text = help_text()
    for flag in RUN_FLAGS:
        assert f"`{flag.name}" in text and flag.doc in text
    for usage in (
        "/bot run [--sha SHA] [flags]",
        "/bot kill",
        '/bot skip --sha SHA --comment "REASON"',
        "/bot reuse-pipeline --sha SHA [#N]",
        "/bot help",
    ):
        assert f"### `{usage}`" in text
    assert text.count("Partly tested") == sum(flag.partly_tested for flag in RUN_FLAGS)


def test_command_line_number_is_recorded() -> None:
    assert parse_comment("hello\n\n/bot kill").line == 3


# Linear parsing (timings: tests/bench/bench_planner.py) -------------------------------------

PROBES = " \t\x0b\nab/`~>#.-*\"'0"


def _chars(state, item) -> set[str]:
    """The probe characters one parsed regex item matches."""
    from re import _compiler, _parser

    compiled = _compiler.compile(_parser.SubPattern(state, [item]), state.flags)
    return {c for c in PROBES if compiled.fullmatch(c)}


def _items(state, items, optional=False):
    """A pattern as a flat sequence: ("star", chars) for an unbounded backtracking repeat,
    ("one", optional) for anything else; optional groups are opened, anchors dropped."""
    from re._constants import AT, MAX_REPEAT, MAXREPEAT, MIN_REPEAT, SUBPATTERN

    for op, av in items:
        if op is SUBPATTERN:
            yield from _items(state, av[3], optional)
        elif op in (MAX_REPEAT, MIN_REPEAT) and av[1] == MAXREPEAT:
            yield "star", set().union(*(_chars(state, item) for item in av[2]))
        elif op in (MAX_REPEAT, MIN_REPEAT) and av[:2] == (0, 1):
            yield from _items(state, av[2], True)
        elif op is not AT:
            yield "one", optional


def overlapping_repeats(pattern: re.Pattern) -> list[str]:
    """Pairs of unbounded repeats with only optional items between them that can match the
    same character: on a long run of that character the engine tries every split (quadratic)."""
    from re import _parser

    parsed = _parser.parse(pattern.pattern, pattern.flags)
    found, last = [], None
    for kind, value in _items(parsed.state, parsed.data):
        if kind == "star":
            if last is not None and last & value:
                found.append(f"{sorted(last)} then {sorted(value)}")
            last = value
        elif not value:  # a required item ends the run of optional ones
            last = None
    return found


def test_the_overlap_check_finds_the_quadratic_bot_line() -> None:
    old = re.compile(r"^[ \t]*/bot(?:[ \t]+(?P<args>.*?))?[ \t]*$")  # 16 KB took 4.8 s
    assert overlapping_repeats(old)
    assert not overlapping_repeats(re.compile(r"^[ \t]*/bot(?:[ \t](?P<args>.*))?$"))


def test_every_grammar_pattern_is_linear() -> None:
    patterns = {n: v for n, v in vars(grammar).items() if isinstance(v, re.Pattern)}
    assert "BOT_LINE" in patterns
    assert {
        name: overlapping_repeats(p) for name, p in patterns.items() if overlapping_repeats(p)
    } == {}


@given(st.text(alphabet=" \t\r\nab-,\"'\\\u00e9"))
@settings(max_examples=500)
def test_split_words_splits_as_shlex_does(line: str) -> None:
    def outcome(split):
        try:
            return split(line)
        except ValueError as error:
            return str(error)

    assert outcome(grammar.split_words) == outcome(shlex.split)


def test_a_long_padded_line_keeps_its_arguments() -> None:
    blanks = " \t" * 2_000
    assert parse_comment(f"/bot{blanks}kill{blanks}") == Command("kill", line=1)


@pytest.mark.parametrize(
    "comment",
    [
        pytest.param("/bot run --" + "x" * 70_000, id="long unknown flag"),
        pytest.param("/bot " + "y" * 70_000, id="long unknown command"),
        pytest.param("/bot kill " + "z" * 70_000, id="long stray argument"),
        pytest.param("/bot reuse-pipeline " + "9x" * 35_000, id="long pipeline id"),
        pytest.param('/bot run --stage-list "' + "a," * 35_000 + '"', id="long list"),
        pytest.param("/bot kill\n" * 20_000, id="many command lines"),
    ],
)
def test_errors_echo_a_short_excerpt_of_a_long_token(comment: str) -> None:
    with pytest.raises(CommandError) as raised:
        parse_comment(comment)
    first = str(raised.value).split("\n\n")[0]  # what precedes the help text
    assert len(first) < 400, first[:500]


# Property tests ------------------------------------------------------------------------------


@given(st.text())
@settings(max_examples=300)
def test_arbitrary_text_raises_only_command_error(text: str) -> None:
    try:
        parse_comment(text)
    except CommandError:
        pass


@given(
    st.lists(
        st.sampled_from(
            [
                "/bot",
                "run",
                "kill",
                "skip",
                "--comment",
                "help",
                "#3",
                "7",
                "reuse-pipeline",
                '"',
                "\u201c",
                "'",
                "```",
                ">",
                "\n",
                "-h",
                *(flag.name for flag in RUN_FLAGS),
                "A10-*",
                "a, b",
                ",",
            ]
        )
    )
)
@settings(max_examples=300)
def test_command_like_text_raises_only_command_error(words: list[str]) -> None:
    try:
        parse_comment(" ".join(words))
    except CommandError:
        pass


STAGE = st.from_regex(r"[A-Z][A-Za-z0-9_]{0,8}(-[A-Za-z0-9_*]{1,6}){0,3}", fullmatch=True)
STAGES = st.lists(STAGE, max_size=3).map(tuple)


@st.composite
def run_commands(draw) -> Command:
    stage_list = draw(STAGES)
    extra = () if stage_list else draw(STAGES)
    only = draw(st.booleans())
    reuse = draw(st.sampled_from([None, "latest", 7, 47634]))
    debug = len(stage_list) == 1 and "*" not in stage_list[0] and draw(st.booleans())
    return run(
        reuse_test=reuse,
        disable_reuse_test=reuse is None and draw(st.booleans()),
        disable_fail_fast=draw(st.booleans()),
        skip_test=draw(st.booleans()),
        stage_list=stage_list,
        gpu_type=draw(STAGES),
        test_backend=tuple(draw(st.lists(st.sampled_from(TEST_BACKENDS), max_size=3))),
        add_multi_gpu_test=(add := not only and draw(st.booleans())),
        only_multi_gpu_test=only,
        disable_multi_gpu_test=not only and not add and draw(st.booleans()),
        post_merge=draw(st.booleans()),
        extra_stage=extra,
        detailed_log=draw(st.booleans()),
        debug=debug,
    )


COMMANDS = st.one_of(
    run_commands(),
    st.just(Command("kill")),
    st.just(Command("help")),
    st.builds(
        lambda c: Command("skip", comment=c),
        # Typographic quotes are always quote marks on a /bot line, and HTML comments are
        # invisible (as on GitHub), so a reason that round-trips holds neither.
        st.text(
            st.characters(
                blacklist_categories=("Cs", "Cc"),
                blacklist_characters="\u201c\u201d\u2018\u2019",
            ),
            min_size=1,
        )
        .filter(lambda reason: "<!--" not in reason)
        .map(str.strip)
        .filter(bool),
    ),
    st.builds(
        lambda n: Command("reuse-pipeline", pipeline_id=n),
        st.one_of(st.none(), st.integers(0, 10**9)),
    ),
)


@given(COMMANDS)
@settings(max_examples=300)
def test_render_then_parse_is_the_same_command(command: Command) -> None:
    assert parse_comment(render(command)) == command
    assert parse_comment(render(command)).to_json() == command.to_json()
