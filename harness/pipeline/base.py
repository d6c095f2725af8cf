"""The base a report compares failures with, chosen the same way by every path that builds one
(`bot run`, `bot report --ledger`, `bot report --results`, `bot publish`).

The base pipeline is the latest finished pipeline on the PR's base commit, else on the default
branch, in main's ledger when one is given (else in the PR's own ledger, excluding the pipeline
being reported). Main's recent history also says which tests are flaky there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stagebot.harness.analysis.flakiness import flaky_evidence, flaky_history
from stagebot.harness.results import TestOutcome
from stagebot.stages.errors import StagebotError
from stagebot.stages.names import stage_family


@dataclass(frozen=True)
class Base:
    pipeline: int | None = None
    outcomes: dict[tuple[str, str], TestOutcome] | None = None  # (stage family, test id)
    flaky: dict[tuple[str, str], tuple[int, ...]] = field(default_factory=dict)
    flaky_evidence: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    logs: dict[tuple[str, str], str] = field(default_factory=dict)  # its failures' text
    commit: str | None = None  # the base pipeline's commit (a dirty identity: its commit)


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
    base the pipeline recorded when it finished (a later re-render keeps it).

    The base is never a pipeline on the commit under test, and in ``book`` itself only one
    numbered before ``exclude``, with main's flaky history as it was then: a report rendered
    again later says what it said when the pipeline finished."""
    source = base_book if base_book is not None else book
    if source is None:
        return Base()
    before = exclude if source is book else None
    tested = book.pipeline(exclude, with_results=False) if book and exclude else None
    number = pinned or source.base_pipeline(
        base_commit,
        default_branch,
        exclude=before,
        before=before,
        not_commit=tested.commit if tested else None,
    )
    outcomes = source.test_outcomes(number) if number is not None else None
    record = source.pipeline(number) if number is not None else None
    return Base(
        number,
        outcomes,
        flaky_history(source, default_branch, before=before),
        flaky_evidence(source, default_branch, before=before),
        {(stage_family(s), t): log for (s, t), log in (record.logs if record else {}).items()},
        (record.commit or "").split("+")[0] or None if record else None,
    )


class BaseCommitError(StagebotError):
    """``--base-commit`` names no commit, or more than one."""


def resolve_base_commit(book, prefix: str, root) -> str:
    """The one commit ``prefix`` names: a commit of the ledger's pipelines that starts with it,
    else the commit git resolves it to. Ambiguous or unknown: an error that says which."""
    from stagebot.harness.pipeline.worktree import resolve_commit

    recorded = book.commits_starting_with(prefix)
    if prefix in recorded:
        return prefix
    if len(recorded) > 1:
        raise BaseCommitError(
            f"--base-commit {prefix} is ambiguous: the ledger {book.path} has pipelines on "
            f"{', '.join(c[:12] for c in recorded)}; give more of the SHA"
        )
    if recorded:
        return recorded[0]
    resolved = resolve_commit(root, prefix)
    if resolved is None:
        raise BaseCommitError(
            f"--base-commit {prefix}: no pipeline of the ledger {book.path} is on a commit that "
            "starts with it, and git knows no single commit by that name; give a SHA (any "
            "unambiguous prefix) of a commit the ledger or this repository has"
        )
    return resolved


def base_target(book, base_commit: str | None, commit: str | None, root, default_branch: str):
    """(commit, how) a local run compares with: ``base_commit`` (any unambiguous prefix, checked
    before anything runs) when given, else the merge-base of ``commit`` with the default branch
    (None when git cannot tell)."""
    from stagebot.harness.pipeline.worktree import merge_base, resolve_commit

    if base_commit:
        return resolve_base_commit(book, base_commit, root), "--base-commit"
    wanted = merge_base(root, commit, default_branch) if commit else None
    if wanted and commit and "+" not in commit and wanted == resolve_commit(root, commit):
        # a clean commit on the default branch: its base is its parent, never itself
        return resolve_commit(root, f"{wanted}^"), "its parent"
    return wanted, f"the merge-base with {default_branch}"


def local_base(
    book, *, base_book, wanted: str | None, how: str, default_branch: str, exclude: int
) -> tuple[Base, str]:
    """The base of a local run and the sentence that names it: a pipeline on ``wanted``
    (``base_target``), else the newest on the default branch."""
    source = base_book if base_book is not None else book
    base = select_base(
        book,
        base_book=base_book,
        base_commit=wanted,
        default_branch=default_branch,
        exclude=exclude,
    )
    where = f"{wanted[:7]} ({how})" if wanted else f"{default_branch}'s merge-base"
    if base.pipeline is None:
        missing = f"on {where} or on {default_branch}" if wanted else f"on {default_branch}"
        return base, (
            f"no pipeline: the ledger {source.path} has no finished pipeline {missing}"
            f"{'' if wanted else f' (git finds no merge-base with {default_branch} here)'}, so "
            "failures cannot be compared (UNCLASSIFIED); run `bot run` on the base commit first"
        )
    found = source.pipeline(base.pipeline, with_results=False)
    if wanted and found is not None and (found.commit or "").split("+")[0] == wanted:
        return base, f"pipeline #{base.pipeline} on {where}"
    return base, (
        f"pipeline #{base.pipeline}, the newest on {default_branch} (the ledger has no "
        f"finished pipeline on {where})"
    )
