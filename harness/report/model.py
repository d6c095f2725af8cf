"""The pipeline report's model: what the renderers and templates read."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stagebot.harness.analysis.causes import cause_line, is_environment
from stagebot.harness.analysis.classify import Analysis, nothing_ran
from stagebot.harness.report.gpu_time import (
    StageGpuTime,
    by_gpu_type,
    cancelled_by_fail_fast,
    minutes_text,
    total,
)
from stagebot.harness.report.headline import headline
from stagebot.harness.report.status import StatusDecision, decide_status
from stagebot.harness.report.status_text import label
from stagebot.harness.report.timeline import timeline
from stagebot.harness.report.units import duration_text
from stagebot.harness.results import FAIL_FAST, StageResult
from stagebot.harness.reuse.sampled import summary as audit_summary
from stagebot.templates.markdown import Trusted


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
    rerun_options: tuple[str, ...] = ()  # what a local run was given that its re-run repeats
    ledger: str = ""  # where a local run is recorded (its re-run must use the same ledger)
    base_note: str = ""  # which pipeline failures were compared with, and how it was found
    root: Path | None = None  # the checkout the tests ran from (the HTML links its files)
    key_reuses: list[tuple[int, bool, int]] = field(
        default_factory=list
    )  # Ledger.key_reuse_sources
    reuse_faults: list[tuple[str, str, int, int, str]] = field(default_factory=list)
    gpu_times: list[StageGpuTime] = field(default_factory=list)  # report/gpu_time.py
    reuse_audits: list[dict] = field(default_factory=list)  # meta["reuse_audits"]

    @property
    def exit_code(self) -> int:
        return self.analysis.exit_code

    @property
    def status(self) -> StatusDecision:
        """The one decision of the status this pipeline sets (report/status.py): the reply
        says what `bot publish` sets."""
        return decide_status(
            pipeline=self.pipeline or 0,
            state=self.state,
            gating=self.gating,
            not_run=len(self.analysis.not_run),
            headline=self.headline(),
            sha7=self.sha7,
        )

    @property
    def sets_status(self) -> bool:
        return self.status.state is not None

    @property
    def dirty(self) -> bool:
        """Run on a work tree with uncommitted changes (harness/pipeline/worktree.py's identity)."""
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
        return Trusted(f"pipeline #{self.pipeline}" if self.local else label(self.pipeline or 0))

    def key_reuse_line(self) -> Trusted:
        """ "N tests reused by key (from #M on main, #K of this PR)": how many of this pipeline's
        tests were not run because their dependency key matched, and whose runs stand for
        them (docs/reuse.md). The bot's own words around numbers: not escaped."""
        total = sum(count for _, _, count in self.key_reuses)
        own = "this branch" if self.pr is None else "this PR"
        name = (lambda n: f"#{n}") if self.local else label
        main = [name(source) for source, on_main, _ in self.key_reuses if on_main]
        mine = [name(source) for source, on_main, _ in self.key_reuses if not on_main]
        sources = ([f"{', '.join(main)} on main"] if main else []) + (
            [f"{', '.join(mine)} of {own}"] if mine else []
        )
        plural = "s" if total != 1 else ""
        return Trusted(f"{total} test{plural} reused by key (from {', '.join(sources)})")

    def reuse_audit_line(self) -> Trusted:
        """ "Reuse audit: N sampled, M disagreed": the tests reused by key that this pipeline's
        stage jobs (main's pipelines) or `bot audit-reuse` ran for real anyway. The bot's own
        words around numbers: not escaped."""
        sampled, disagreed = audit_summary(self.reuse_audits)
        return Trusted(f"Reuse audit: {sampled} sampled, {disagreed} disagreed")

    def reuse_fault_lines(self) -> list[str]:
        """One line per reuse fault the audit found in this pipeline."""
        return [
            f"{test} ({family}): reused by key from #{source}, but {detail}; its key is "
            "conservative from now on (it re-runs on any change)"
            for family, test, _, source, detail in self.reuse_faults
        ]

    def local_command(self, command: str | None = None) -> str:
        """The `bot run` that runs this pipeline's command (or ``command``) on this machine
        again, with the options that found its catalog, history and shards: pasted, it works."""
        options = "".join(f"{shlex.quote(word)} " for word in self.rerun_options)
        return f"bot run {options}{_shell_word(command or self.command)}"

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
                f"`{self.local_command('/bot run')}` runs all of it."
            )
        return f"{why}, so this run does not set the PR's status; comment plain `/bot run` for it."

    def headline(self) -> str:
        """The one line that says what happened and what to do (report/headline.py)."""
        return headline(
            self.analysis,
            state=self.state,
            local=self.local,
            gating=self.gating,
            again=self.again(),
            environment_errors=len(self.environment_errors()),
            ran=not nothing_ran(self.results),
        )

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
                    "duration": duration_text(result.duration_s),
                    "gpu": result.gpu_type + (f" ({','.join(result.gpus)})" if result.gpus else ""),
                    "reused_from": f"#{result.reused_from}" if result.reused_from else "",
                    "tests": ", ".join(f"{n} {o}" for o, n in counts.items())
                    + (f"{', ' if counts else ''}{reused} reused" if reused else ""),
                    "note": cause_line(result.evidence) if result.state != "SUCCESS" else "",
                }
            )
        return rows

    def fail_fast(self) -> tuple[str, list[str]]:
        """(why fail-fast cancelled stages, which), ("", []) when it cancelled none."""
        cancelled = [r for r in self.results if cancelled_by_fail_fast(r)]
        if not cancelled:
            return "", []
        why = (cancelled[0].evidence or "").removeprefix(FAIL_FAST).lstrip(": ")
        return why, [r.stage for r in cancelled]

    def gpu_rows(self) -> list[dict[str, str]]:
        """The GPU time table: one row per GPU stage, then the total (GPU-minutes)."""
        rows = [
            {"stage": row.stage, "gpu": f"{row.gpus} x {row.gpu_type}"}
            | {name: minutes_text(value) for name, value in row.figures().items()}
            for row in self.gpu_times
            if row.gpus
        ]
        if rows:
            rows.append(
                {"stage": "total", "gpu": ""}
                | {name: minutes_text(value) for name, value in total(self.gpu_times).items()}
            )
        return rows

    def gpu_minutes(self) -> dict[str, Any]:
        """The GPU time as `bot report --format json` gives it."""
        return {
            "stages": [
                {"stage": row.stage, "gpu_type": row.gpu_type, "gpus": row.gpus, **row.figures()}
                for row in self.gpu_times
            ],
            "total": total(self.gpu_times),
            "by_gpu_type": by_gpu_type(self.gpu_times),
        }

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
        """Gantt bars by slot for the HTML report (report/timeline.py)."""
        return timeline(self.results, self.slots, width, lane_height)


def _shell_word(text: str) -> str:
    """``text`` as one shell word, in single quotes unless it holds one."""
    if "'" not in text:
        return f"'{text}'"
    if not any(c in text for c in '"$`\\!'):
        return f'"{text}"'
    return shlex.quote(text)
