"""The gating commit status' description: the one place it is written and read.

A pipeline's own status begins with its label and a space (``PR_Github #12 passed on abc1234``);
`bot publish` reads that prefix to tell whose status is the newest (``status_pipeline``). A
person's skip or reuse-pipeline writes a description without the prefix, so no pipeline's
report overwrites it (``outranks``). The reply's wording of a pipeline uses ``label`` too.
"""

from __future__ import annotations

import re

LABEL = "PR_Github"
_OWN = re.compile(rf"^{LABEL} #(?P<number>[1-9][0-9]{{0,18}}) ")


def label(number: int) -> str:
    """How GitHub-facing text names pipeline ``number``: ``PR_Github #12``."""
    return f"{LABEL} #{number}"


def pipeline_status(number: int, what: str) -> str:
    """A description pipeline ``number`` owns: its label, a space, then ``what``."""
    if not what:
        raise ValueError("a pipeline's status says what happened after its label")
    return f"{label(number)} {what}"


def running(number: int, sha7: str) -> str:
    return pipeline_status(number, f"is running on {sha7}")


def gave_up(number: int) -> str:
    return pipeline_status(number, "could not start its stage run: comment /bot run again")


def unreported(number: int) -> str:
    return pipeline_status(number, "could not be reported: re-run the report job")


def skipped(login: str, reason: str) -> str:
    """A person's `/bot skip`: no pipeline prefix, so no report overwrites it."""
    return f"Skipped by @{login}: {reason}"


def validated(source: int, login: str) -> str:
    """A person's `/bot reuse-pipeline`: no pipeline prefix, so no report overwrites it."""
    return f"Validated by {label(source)} (reuse-pipeline by @{login})"


def status_pipeline(description: str) -> int | None:
    """The pipeline that owns a status ``description``; None for a person's skip or reuse (or
    any other text)."""
    match = _OWN.match(description)
    return int(match["number"]) if match else None


def owns(description: str, number: int) -> bool:
    return status_pipeline(description) == number


def outranks(description: str, number: int) -> bool:
    """Whether a status must not be overwritten by pipeline ``number``'s: a newer pipeline's or
    a person's skip / reuse (no pipeline prefix)."""
    owner = status_pipeline(description)
    return owner is None or owner > number
