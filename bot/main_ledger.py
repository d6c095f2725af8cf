"""Main's ledger (the post-merge history) is authenticated by a commit status.

The Actions cache that carries it can be written by the code a stage job runs. So the report job
of a post-merge pipeline records the sha256 of the ledger it saves as the description of a
``stagebot/ledger`` status on that pipeline's commit: statuses need ``statuses: write``, which
only the bot's own jobs hold (the stage jobs hold ``contents: read``). A restored main ledger is
used only when the newest pipeline it holds names a commit whose ``stagebot/ledger`` status
records the file's digest, and no SQLite side file lies beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from stagebot.bot.github import GitHubApi

LEDGER_STATUS = "stagebot/ledger"
_PREFIX = "ledger sha256 "


def status_description(digest: str) -> str:
    return _PREFIX + digest


def recorded_digests(connect: Callable[[], GitHubApi], path: Path) -> set[str]:
    """The digests the bot recorded for the ledger at ``path``: those of the ``stagebot/ledger``
    statuses on the commit of the newest pipeline it holds (none, and no GitHub call, when it
    cannot be read)."""
    from stagebot.bot.ledger import Ledger, LedgerError

    try:
        with Ledger.open(path, readonly=True) as book:
            number = book.latest_number()
            record = book.pipeline(number, with_results=False) if number else None
    except LedgerError:
        return set()
    if record is None or not record.commit:
        return set()
    return {
        status.description.removeprefix(_PREFIX)
        for status in connect().statuses(record.commit, LEDGER_STATUS)
        if status.description.startswith(_PREFIX)
    }
