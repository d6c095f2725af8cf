"""The Command contract: what a `/bot` comment asks for, as plain data (schema: command.v1).

The `/bot run` flags are declared here too, beside the RunOptions fields they set, because the
planner and the report read them; bot/comments/grammar.py parses comments into these types.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from stagebot.stages.errors import CommandError

COMMAND_VERSION = 1
SUBCOMMANDS = ("run", "kill", "skip", "reuse-pipeline", "help")
TEST_BACKENDS = ("pytorch", "cpp", "tensorrt", "triton", "autodeploy", "python")


@dataclass(frozen=True)
class RunOptions:
    """Options of `/bot run`; field names are the flag names in snake_case."""

    reuse_test: str | int | None = None  # None: flag absent; "latest": given bare; int: pipeline id
    disable_reuse_test: bool = False
    disable_fail_fast: bool = False
    skip_test: bool = False
    stage_list: tuple[str, ...] = ()
    gpu_type: tuple[str, ...] = ()
    test_backend: tuple[str, ...] = ()
    add_multi_gpu_test: bool = False
    only_multi_gpu_test: bool = False
    disable_multi_gpu_test: bool = False
    post_merge: bool = False
    extra_stage: tuple[str, ...] = ()
    detailed_log: bool = False
    debug: bool = False


@dataclass(frozen=True)
class Command:
    """A parsed `/bot` command; ``name`` is None when the comment holds no `/bot` line."""

    name: str | None
    run: RunOptions | None = None
    comment: str | None = None  # skip --comment
    pipeline_id: int | None = None  # reuse-pipeline [N]
    sha: str | None = None  # --sha: the head commit the commenter approved (a hex prefix)
    line: int | None = field(default=None, compare=False)  # 1-based line of the comment

    def options(self) -> dict[str, Any]:
        if self.name == "run":
            assert self.run is not None
            return {
                key: list(value) if isinstance(value, tuple) else value
                for key, value in self.run.__dict__.items()
            }
        if self.name == "skip":
            return {"comment": self.comment}
        if self.name == "reuse-pipeline":
            return {"pipeline_id": self.pipeline_id}
        return {}

    def to_json(self) -> dict[str, Any]:
        data = {"version": COMMAND_VERSION, "command": self.name, "options": self.options()}
        return data | ({"sha": self.sha} if self.sha is not None else {})

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Command:
        if data.get("version") != COMMAND_VERSION:
            raise CommandError(
                f"unsupported Command version {data.get('version')!r}; expected {COMMAND_VERSION}"
            )
        name, options = data.get("command"), data.get("options", {})
        sha = data.get("sha")
        if sha is not None and not (isinstance(sha, str) and 7 <= len(sha) <= 40):
            raise CommandError(f"Command sha {sha!r} is not a 7 to 40 digit hex prefix")
        if name is not None and name not in SUBCOMMANDS:
            raise CommandError(
                f"unknown command {name!r}; expected one of {', '.join(SUBCOMMANDS)}"
            )
        if name == "run":
            known = RunOptions.__dataclass_fields__
            unknown = sorted(set(options) - set(known))
            if unknown:
                raise CommandError(f"unknown run option(s) {unknown}; expected {sorted(known)}")
            values = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
            return cls("run", run=RunOptions(**values), sha=sha)
        if name == "skip":
            return cls("skip", comment=options.get("comment"), sha=sha)
        if name == "reuse-pipeline":
            return cls("reuse-pipeline", pipeline_id=options.get("pipeline_id"), sha=sha)
        return cls(name)


@dataclass(frozen=True)
class Flag:
    """One `/bot run` flag; kind "bool", "list" (comma-separated) or "pipeline" (optional id)."""

    name: str
    kind: str
    doc: str
    metavar: str = ""
    partly_tested: bool = False  # a run with this flag cannot set the PR's gating status

    @property
    def field(self) -> str:
        return self.name.removeprefix("--").replace("-", "_")


RUN_FLAGS = (
    Flag(
        "--reuse-test",
        "pipeline",
        "Reuse tests that passed on this commit in pipeline N, or in "
        "the latest pipeline when N is left out. This is the default.",
        "[N]",
    ),
    Flag("--disable-reuse-test", "bool", "Run every test, even those that passed before."),
    Flag(
        "--disable-fail-fast",
        "bool",
        "Keep running the other stages after one ends with a NEW failure (main's "
        "post-merge pipelines always do: they are every PR's base).",
    ),
    Flag("--skip-test", "bool", "Run only the build and sanity stages.", partly_tested=True),
    Flag(
        "--stage-list",
        "list",
        "Run exactly these stages (`*` wildcards allowed).",
        '"A10-PyTorch-1, …"',
        partly_tested=True,
    ),
    Flag(
        "--gpu-type",
        "list",
        "Keep only stages on these GPU types.",
        '"A30, H100_PCIe"',
        partly_tested=True,
    ),
    Flag(
        "--test-backend",
        "list",
        f"Keep only stages of these backends ({', '.join(TEST_BACKENDS)}).",
        '"pytorch, cpp"',
        partly_tested=True,
    ),
    Flag("--add-multi-gpu-test", "bool", "Add every multi-GPU pre-merge stage (needs approval)."),
    Flag(
        "--only-multi-gpu-test",
        "bool",
        "Keep only multi-GPU stages (needs approval).",
        partly_tested=True,
    ),
    Flag("--disable-multi-gpu-test", "bool", "Drop the multi-GPU stages.", partly_tested=True),
    Flag(
        "--post-merge", "bool", "Run the post-merge pipeline as well as pre-merge (needs approval)."
    ),
    Flag(
        "--extra-stage",
        "list",
        "Run the default selection plus these stages.",
        '"H100_PCIe-PyTorch-Post-Merge-1, …"',
    ),
    Flag("--detailed-log", "bool", "Stream every stage's full log."),
    Flag(
        "--debug",
        "bool",
        "Keep the one stage named in --stage-list for debugging and print how to re-run it.",
        partly_tested=True,
    ),
)
RUN_FLAGS_BY_NAME = {flag.name: flag for flag in RUN_FLAGS}


def render(command: Command) -> str:
    """Write a Command back as a `/bot` line that parses to the same Command."""
    if command.name is None:
        return ""
    words = ["/bot", command.name]
    if command.sha is not None:
        words += ["--sha", command.sha]
    if command.name == "run":
        assert command.run is not None
        for flag in RUN_FLAGS:
            value = getattr(command.run, flag.field)
            if value is True or value == "latest":
                words.append(flag.name)
            elif flag.kind == "list" and value:
                words += [flag.name, shlex.quote(", ".join(value))]
            elif flag.kind == "pipeline" and isinstance(value, int):
                words += [flag.name, str(value)]
    elif command.name == "skip":
        words += ["--comment", shlex.quote(command.comment or "")]
    elif command.name == "reuse-pipeline" and command.pipeline_id is not None:
        words.append(f"#{command.pipeline_id}")
    return " ".join(words)
