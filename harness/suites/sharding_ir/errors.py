"""The suite's user-facing error: a size that cannot be split, a bad DistConfig, an unknown id."""

import difflib

from stagebot.stages.errors import StagebotError


class ShardingIRError(StagebotError, ValueError):
    """A sharding-IR input the user can fix; the message says what was wrong and what is right."""


def did_you_mean(name: str, choices: list[str]) -> str:
    """A " did you mean 'x'?" suffix for the closest choice, or "" when none is close."""
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.5)
    return f" Did you mean {close[0]!r}?" if close else ""
