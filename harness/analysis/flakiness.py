"""Which tests are flaky on a branch, read from the ledger's history (the failure analysis'
"flaky on main" evidence).

Dr. CI's two signs: a test that failed and then passed on a re-run (outcome ``flaky``), or one
that failed in one pipeline and passed in another at the same commit.
"""

from __future__ import annotations

from stagebot.harness.ledger.tests import HISTORY_PIPELINES
from stagebot.stages.names import stage_family

Key = tuple[str, str]  # (stage family, test id)


def flaky_history(
    book, branch: str, last: int = HISTORY_PIPELINES, before: int | None = None
) -> dict[Key, tuple[int, ...]]:
    """(stage family, test id) -> the pipelines on ``branch`` (the latest ``last``, numbered
    below ``before`` when given) where the test was flaky."""
    flaky: dict[Key, set[int]] = {}
    at_commit: dict[tuple[str, str, str], dict[str, list[int]]] = {}
    history = book.test_history(branch, last=last, before=before)
    for number, commit, stage, test_id, outcome, _ in history:
        key = (stage_family(stage), test_id)
        if outcome == "flaky":
            flaky.setdefault(key, set()).add(number)
        elif outcome in ("passed", "failed", "error") and commit:
            kind = "passed" if outcome == "passed" else "failed"
            at_commit.setdefault((*key, commit), {}).setdefault(kind, []).append(number)
    for (family, test_id, _), kinds in at_commit.items():
        if "passed" in kinds and "failed" in kinds:
            flaky.setdefault((family, test_id), set()).update(kinds["failed"])
    return {key: tuple(sorted(numbers)) for key, numbers in flaky.items()}


def flaky_evidence(
    book, branch: str, last: int = HISTORY_PIPELINES, before: int | None = None
) -> dict[Key, tuple[str, ...]]:
    """(stage family, test id) -> how it failed in the pipelines where ``flaky_history`` saw it
    flaky (the evidence of the failed attempt), oldest first: a failure of another kind is not
    that flakiness."""
    flaky = flaky_history(book, branch, last, before)
    found: dict[Key, list[str]] = {}
    for number, stage, test_id, outcome, evidence in book.failure_evidence(branch, last, before):
        key = (stage_family(stage), test_id)
        if number in flaky.get(key, ()):
            if outcome == "flaky":
                evidence = evidence.split("after: ", 1)[-1]
            found.setdefault(key, []).append(evidence)
    return {key: tuple(evidences) for key, evidences in found.items()}
