"""Main's ledger (the post-merge history) is authenticated by a commit status.

It travels as an artifact of the bot's report runs (bot/custody/transport.py); this is a second,
independent check: the report job of a post-merge pipeline records the sha256 of the ledger it
saves as the description of a ``stagebot/ledger`` status (statuses need ``statuses: write``,
which only the bot's own jobs hold; the stage jobs hold ``contents: read``). The status goes on
the commit of the newest pipeline the ledger holds, and a fetched main ledger is used only when
that commit carries a status with the file's digest (and no SQLite side file would replay
changes into it). The status also names the report run that uploaded the ledger: the plan job
finds main's ledger by walking the default branch's newest commits to the first such status
and reads that run's own artifacts (bot/custody/transport.py). The commit is read from the
untrusted file, so it must be a full hex SHA: anything else (a path, say) vouches for nothing.

Not covered: replay. Any ledger the bot once saved for main stays vouched for, so a restored
older one rolls the history back (less reuse and a staler failure-analysis base, never a
failure turned into a pass).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from stagebot.bot.github import GitHubApi

LEDGER_STATUS = "stagebot/ledger"
RECORDED_WHERE = f"the {LEDGER_STATUS} statuses of the commit it names"
_SHA = re.compile(r"[0-9a-f]{40}")
_DESCRIPTION = re.compile(
    r"^ledger sha256 (?P<digest>[0-9a-f]{64})(?: run (?P<run>[1-9][0-9]{0,18}))?$"
)


def status_description(digest: str, run_id: int | None) -> str:
    """The ledger's sha256 and the report run whose artifact holds it (the fetch reads that
    run's own artifact list, never a search by name)."""
    return f"ledger sha256 {digest}" + (f" run {run_id}" if run_id is not None else "")


def parse_description(description: str) -> tuple[str, int | None] | None:
    """(digest, run id) of a ``stagebot/ledger`` status description; None for anything else."""
    match = _DESCRIPTION.match(description)
    if match is None:
        return None
    return match["digest"], int(match["run"]) if match["run"] else None


def vouching_commit(path: Path) -> str | None:
    """The commit whose status vouches for the ledger at ``path``: that of the newest pipeline
    it holds, when it is a full hex SHA; None when there is none or the file cannot be read."""
    from stagebot.harness.ledger.book import Ledger
    from stagebot.harness.ledger.store import LedgerError

    try:
        with Ledger.open(path, readonly=True) as book:
            number = book.latest_number()
            record = book.pipeline(number, with_results=False) if number else None
    except LedgerError:
        return None
    commit = record.commit if record is not None else None
    return commit if commit and _SHA.fullmatch(commit) else None


def recorded_digests(connect: Callable[[], GitHubApi], path: Path) -> set[str]:
    """The digests the bot recorded for the ledger at ``path`` (none, and no GitHub call, when
    no commit can vouch for it)."""
    commit = vouching_commit(path)
    if commit is None:
        return set()
    found = (parse_description(s.description) for s in connect().statuses(commit, LEDGER_STATUS))
    return {record[0] for record in found if record is not None}
