"""The first signal: a shard's NEW failures, said the moment it ends, and whether they condemn
the pipeline (fail-fast cancels the rest): locally as each shard ends (`bot run`), on GitHub as
each stage run ends (the report job, bot/actions/report_run.py).

A shard condemns the pipeline when the failure analysis, run on that shard alone against the
pipeline's base, finds a failure that is NEW or UNCLASSIFIED (no base to clear it): a FLAKY,
INFRA, PRE-EXISTING or WAIVED one says nothing the rest of the pipeline could not change, so the
other stages go on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from stagebot.harness.analysis.causes import cause_line
from stagebot.harness.analysis.classify import Failure, analyse
from stagebot.harness.report.build import base_arguments
from stagebot.harness.results import StageResult
from stagebot.harness.run.recording import logs_of

CONDEMNING = ("NEW", "UNCLASSIFIED")


def condemning_failures(
    result: StageResult,
    *,
    base,
    changed_files: list[str] | None,
    stage_paths: Mapping[str, list[str]] | None,
    root: Path | None,
) -> list[tuple[Failure, list[Failure]]]:
    """``result``'s failures that condemn its pipeline (NEW or UNCLASSIFIED against ``base``),
    identical ones folded into their first as the report folds them: [(first, the others)]."""
    if result.state not in ("FAILURE", "ERROR"):
        return []
    logs = {(result.stage, test_id): log for test_id, log in logs_of(result).items()}
    analysis = analyse(
        [result],
        **base_arguments(base),
        changed_files=changed_files,
        stage_paths=stage_paths,
        logs=logs,
        root=root,
    )
    return [group for category in CONDEMNING for group in analysis.groups(category)]


def signal_line(failure: Failure, others: list[Failure]) -> str:
    """One line for the terminal: category, stage, test id, the first key line, and how many
    more tests failed the same way (250 tests of one cause are one line, not 250)."""
    first = failure.key_lines[0] if failure.key_lines else cause_line(failure.evidence)
    same = f" (and {len(others)} more test(s) with the same error)" if others else ""
    return f"{failure.category} {failure.stage} {failure.test_id}: {first}{same}"


@dataclass(frozen=True)
class Condemned:
    """Why a finished shard condemns its pipeline: its first condemning failure, and how many
    condemning failures it had in all."""

    stage: str
    category: str
    test_id: str
    count: int

    @property
    def headline(self) -> str:
        """``NEW failure in <stage>``: what the gating status' description says."""
        return f"{self.category} failure in {self.stage}"

    @property
    def detail(self) -> str:
        """The first failing test, and how many more condemn."""
        more = f" and {self.count - 1} more" if self.count > 1 else ""
        return f"{self.test_id}{more}"

    def __str__(self) -> str:
        return f"{self.headline}: {self.detail}"


def condemned(result: StageResult, groups) -> Condemned | None:
    """What ``groups`` (``condemning_failures`` of ``result``) condemn; None when nothing."""
    if not groups:
        return None
    first = groups[0][0]
    count = sum(len(others) + 1 for _, others in groups)
    return Condemned(result.stage, first.category, first.test_id, count)


def first_condemned(results: list[StageResult], **context) -> Condemned | None:
    """The first of ``results`` (finished shards, in the plan's order) that condemns the
    pipeline, or None: the report job's fail-fast on GitHub decides by it."""
    for result in results:
        found = condemned(result, condemning_failures(result, **context))
        if found is not None:
            return found
    return None


def condemner(say: Callable[[str], None], **context) -> Callable[[StageResult], str | None]:
    """``Settings.condemns`` for `bot run`: says each NEW failure of a shard as it ends (one
    line per cause) and returns why the pipeline is condemned (None when nothing is NEW)."""

    def condemns(result: StageResult) -> str | None:
        groups = condemning_failures(result, **context)
        for failure, others in groups:
            say(signal_line(failure, others) + "\n")
        found = condemned(result, groups)
        return str(found) if found else None

    return condemns
