"""The base a report compares failures with, chosen the same way by every path that builds one
(`bot run`, `bot report --ledger`, `bot report --results`, `bot publish`).

The base pipeline is the latest finished pipeline on the PR's base commit, else on the default
branch, in main's ledger when one is given (else in the PR's own ledger, excluding the pipeline
being reported). Main's recent history also says which tests are flaky there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stagebot.harness.results import TestOutcome


@dataclass(frozen=True)
class Base:
    pipeline: int | None = None
    outcomes: dict[tuple[str, str], TestOutcome] | None = None  # (stage family, test id)
    flaky: dict[tuple[str, str], tuple[int, ...]] = field(default_factory=dict)
    flaky_evidence: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)


def select_base(
    book,
    *,
    base_book=None,
    base_commit: str | None = None,
    default_branch: str = "main",
    exclude: int | None = None,
    pinned: int | None = None,
) -> Base:
    """The base of a report of ``book``'s pipeline ``exclude`` (or of loose result files):
    ``base_book`` (main's ledger, read-only) when given, else ``book`` itself. ``pinned``: the
    base the pipeline recorded when it finished (a later re-render keeps it)."""
    source = base_book if base_book is not None else book
    if source is None:
        return Base()
    number = pinned or source.base_pipeline(
        base_commit, default_branch, exclude=exclude if source is book else None
    )
    outcomes = source.test_outcomes(number) if number is not None else None
    return Base(
        number,
        outcomes,
        source.flaky_history(default_branch),
        source.flaky_evidence(default_branch),
    )
