"""The Command contract: what a `/bot` comment asks for, as plain data (schema: command.v1)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

COMMAND_VERSION = 1
SUBCOMMANDS = ("run", "kill", "skip", "reuse-pipeline", "help")
TEST_BACKENDS = ("pytorch", "cpp", "tensorrt", "triton", "autodeploy")


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
        from stagebot.bot.errors import CommandError

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
