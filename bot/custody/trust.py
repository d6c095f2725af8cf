"""The bot's custody of the pipeline ledger in Actions: the one place that decides whether a
ledger handed to a job is used, and records what the bot saved.

The mechanics live beside it: ``ledger_files`` (digests, SQLite side files),
``ledger_transport`` (fetching from the bot's own runs' artifacts), ``main_ledger`` (the
``stagebot/ledger`` status that vouches for main's ledger). The commands ask this module:

- ``RestoredLedger``: the ledger restored for a plan job, opened only when a step needs it,
  checked against the digests the bot recorded (``trusted``), moved aside when unusable;
- ``open_main_ledger``: main's ledger for the report's base, used only when vouched for;
- ``check_plan_artifact``: the report job's plan.json and ledger are what the plan job left;
- ``record_main_ledger``: after a post-merge report, the saved ledger's digest as a status;
- ``notice_file``: what `bot fetch-ledger` could not fetch, for the plan job's reply.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from stagebot.bot.custody.files import file_digest, unvouched_reason
from stagebot.stages.errors import StagebotError

if TYPE_CHECKING:
    from stagebot.harness.ledger.book import Ledger

PR_RECORDS = "the bot's replies on this PR"  # where a PR ledger's digests are recorded


def notice_file(ledger: Path) -> Path:
    """Where fetch-ledger leaves what went wrong, for handle-event's reply."""
    return ledger.with_name(ledger.name + ".notice")


class RestoredLedger:
    """The ledger carried from the previous pipeline, opened only when a step needs it (an event
    that is not for the bot never touches it). A ledger whose digest ``trusted`` does not list,
    or that cannot be opened (corrupt, unreadable, another schema), is moved aside
    (``<name>.rejected-<time>``) and replaced by an empty one: the pipeline starts without
    history rather than the PR being stuck; ``notice`` says so, and the bot's reply carries it.
    ``trusted`` (None: not checked) reads the digests recorded in ``recorded_where``."""

    def __init__(
        self,
        path: Path | None,
        *,
        trusted: Callable[[], set[str]] | None = None,
        recorded_where: str = PR_RECORDS,
    ) -> None:
        self.path = path
        self.trusted = trusted
        self.recorded_where = recorded_where
        self.notice: str | None = None
        if path is not None and notice_file(path).is_file():  # fetch-ledger could not fetch it
            self.notice = notice_file(path).read_text(encoding="utf-8").strip()
        self._book: Ledger | None = None
        self._checked = False  # the file is checked once: later opens are of this job's own

    def get(self) -> Ledger | None:
        if self.path is not None and self._book is None:
            self._book = self._open(self.path)
        return self._book

    def digest(self) -> str | None:
        """The sha256 the file will have when this job saves it (every committed change written
        into it: the ledger stays open); None when no step used the ledger."""
        if self._book is None or self.path is None:
            return None
        self._book.checkpoint()
        return file_digest(self.path)

    def close(self) -> None:
        """Close the ledger if a step opened it: its file then holds every change (no WAL)."""
        if self._book is not None:
            self._book.close()
            self._book = None

    def _open(self, path: Path) -> Ledger:
        from stagebot.harness.ledger.book import Ledger
        from stagebot.harness.ledger.store import LedgerError

        path.parent.mkdir(parents=True, exist_ok=True)
        checked, self._checked = self._checked, True
        if not checked and self.trusted is not None and path.exists():
            why = unvouched_reason(path, self.trusted, self.recorded_where)
            if why is not None:
                self._reject(path, f"is not one the bot saved ({why})")
                return Ledger.open(path)
        try:
            return Ledger.open(path)
        except LedgerError as error:
            self._reject(path, f"could not be used ({error})")
        return Ledger.open(path)

    def _reject(self, path: Path, why: str) -> None:
        aside = move_aside(path)
        self.notice = (
            f"The pipeline ledger handed to this job {why}; it was moved aside to {aside.name} "
            "and this pipeline starts from an empty history (nothing is reused)."
        )


def move_aside(path: Path) -> Path:
    """Rename the ledger and its side files to ``<name>.rejected-<time>``; returns the new path."""
    from datetime import UTC, datetime

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    aside = path.with_name(f"{path.name}.rejected-{stamp}")
    for suffix in ("", "-wal", "-shm", "-journal"):
        part = path.with_name(path.name + suffix)
        if part.exists():
            part.rename(aside.with_name(aside.name + suffix))
    return aside


class ArtifactMismatch(StagebotError):
    """The plan artifact is not what the plan job left (replaced between the jobs)."""

    exit_code = 3


def check_plan_artifact(expected: str, plan_path: Path | None, ledger: Path) -> None:
    """The report job's plan.json and ledger (with its side files) must have the digest the
    plan job recorded as its output, which the stage jobs cannot touch."""
    from stagebot.bot.custody.files import artifact_digest, artifact_files

    if plan_path is None:
        raise StagebotError("an artifact digest needs plan.json (the digest covers it)")
    actual = artifact_digest(artifact_files(plan_path, ledger))
    if actual != expected:
        raise ArtifactMismatch(
            f"the plan artifact ({plan_path}, {ledger} and its side files) has digest "
            f"{actual[:16]}…, not the {expected[:16] or '(empty)'}… the plan job recorded: it "
            "was replaced or damaged after the plan job, so nothing is published and the "
            "status stays pending; comment /bot run again for a new pipeline"
        )


def open_main_ledger(connect: Callable, path: Path | None) -> tuple[Ledger | None, list[str]]:
    """(main's ledger opened read-only, or None; what to say): used only when the bot recorded
    its digest (bot/custody/main_ledger.py), else failures are compared within the PR's own
    ledger."""
    from stagebot.bot.custody.main_ledger import RECORDED_WHERE, recorded_digests
    from stagebot.harness.ledger.book import Ledger

    if path is None or not path.exists():
        return None, []
    why = unvouched_reason(path, lambda: recorded_digests(connect, path), RECORDED_WHERE)
    if why is not None:
        return None, [
            f"warning: main's ledger {path} is not one the bot saved ({why}); failures are "
            "compared within this PR's ledger"
        ]
    return Ledger.open(path, readonly=True), []


def fetched_main_ledger(api, config, dest: Path) -> Ledger | None:
    """Main's newest ledger, fetched to ``dest`` and opened read-only when the bot vouched for
    it, for reuse by key to offer main's post-merge passes to a PR (harness/reuse/offers.py);
    None when there is none or it cannot be had (the PR then reuses only its own)."""
    from stagebot.bot.custody.transport import fetch_main_ledger
    from stagebot.stages.errors import StagebotError

    try:
        found, _ = fetch_main_ledger(api, config, dest)
        return open_main_ledger(lambda: api, dest)[0] if found else None
    except StagebotError:
        return None


def record_main_ledger(api, ledger: Path, run_id: int | None) -> str:
    """Post-merge: record the saved ledger's digest as the stagebot/ledger status of the commit
    the next pipeline will look at (main_ledger.vouching_commit) before it uses the ledger."""
    from stagebot.bot.custody.main_ledger import LEDGER_STATUS, status_description, vouching_commit

    commit = vouching_commit(ledger)
    if commit is None:
        return "no pull request, and no commit to vouch for the ledger: its digest is unrecorded"
    description = status_description(file_digest(ledger), run_id)
    api.set_status(commit, "success", LEDGER_STATUS, description, None)
    return (
        "no pull request: nothing to reply to (post-merge history recorded; its sha256 is the "
        f"{LEDGER_STATUS} status of {commit[:7]})"
    )


def main_ledger_trust(connect: Callable, path: Path) -> Callable[[], set[str]]:
    """What vouches for a restored main ledger: the stagebot/ledger statuses of its commit."""
    from stagebot.bot.custody.main_ledger import recorded_digests

    return lambda: recorded_digests(connect, path)
