"""Which pipeline may validate a commit without running it (`/bot reuse-pipeline [N]`).

The policy: N (default: the PR's latest successful gating pipeline that is not itself such a
validation) must have ended SUCCESS, have been gating (not Partly Tested) and have run every
stage it planned. The decision is recorded as a pipeline of its own (SUCCESS, validated by N),
which the ledger stores (harness/ledger/).
"""

from __future__ import annotations

from dataclasses import dataclass

from stagebot.stages.command import Command


@dataclass(frozen=True)
class Validation:
    """The answer to `/bot reuse-pipeline [N]`."""

    pipeline: int | None  # the new pipeline that records the decision (None: refused)
    source: int | None  # N
    source_commit: str | None
    ok: bool
    reason: str


def record_validation(
    book,
    head_commit: str,
    source: int | None,
    *,
    pr: int | None = None,
    number: int | None = None,
) -> Validation:
    """`/bot reuse-pipeline [N]`: the head commit is validated by N when the policy allows it;
    the validation is recorded as pipeline ``number`` (in Actions: the workflow run number),
    else the next."""
    if source is None:
        source = book.latest_validating(pr)
        if source is None:
            return Validation(None, None, None, False, "no successful gating pipeline to reuse")
    record = book.pipeline(source)
    if record is None:
        return Validation(None, source, None, False, book.unknown_pipeline(source))
    why = _cannot_validate(record)
    if why is not None:
        return Validation(None, source, record.commit, False, why + "; run `/bot run`")
    command = Command("reuse-pipeline", pipeline_id=source).to_json()
    number = book.record_validated(command, head_commit, source, pr=pr, number=number)
    return Validation(number, source, record.commit, True, f"validated by #{source}")


def _cannot_validate(record) -> str | None:
    """Why pipeline ``record`` cannot validate another commit, or None when it can."""
    not_run = [r.stage for r in record.results if r.state == "NOT_RUN"]
    if record.state != "SUCCESS":
        return f"pipeline #{record.number} ended {record.state}"
    if not record.gating:
        return f"pipeline #{record.number} was a partial run (Partly Tested): it cannot validate"
    if not_run:
        listed = ", ".join(not_run[:3]) + (", …" if len(not_run) > 3 else "")
        return (
            f"pipeline #{record.number} did not run {len(not_run)} stage(s) ({listed}): "
            "it cannot validate"
        )
    return None
