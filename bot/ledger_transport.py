"""How the ledgers travel between pipelines: as artifacts of the bot's own privileged runs.

Only runs that execute default-branch code and no PR code upload them (the plan job of bot.yml
and the report job of report.yml), so no PR code can write one; PR code runs in stage runs,
which the bot never takes a ledger from. The name carries the file's sha256
(``stagebot-ledger-<sha256>``), and the bot's replies record the digest of the ledger each
of its jobs left; the plan job takes the one the newest such reply names, from a run of the bot's
own workflows, and checks its sha256. Main's ledger (post-merge history, the base of PR failure
analysis) is ``stagebot-ledger-main``, uploaded by report runs; the newest one from a
report.yml run on the default branch is taken, and bot.main_ledger then checks its digest
against the ``stagebot/ledger`` status. Nothing is restored from the Actions cache.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from stagebot.bot.artifact_zip import ArtifactError, unpack
from stagebot.bot.config import BotConfig
from stagebot.bot.github import Artifact, GitHubApi
from stagebot.bot.replies import Reply
from stagebot.bot.stage_runs import own_run_problem

LEDGER_PREFIX = "stagebot-ledger-"
MAIN_LEDGER = "stagebot-ledger-main"
LEDGER_FILE = "ledger.sqlite"
MAX_ZIP = 512 << 20
CANDIDATES = 10  # how many replies / artifacts are tried before starting empty


def ledger_artifact(digest: str) -> str:
    return LEDGER_PREFIX + digest


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def bots_ledger_problem(
    api: GitHubApi, artifact: Artifact, config: BotConfig, default_branch: str, workflows
) -> str | None:
    """Why ``artifact`` is not a ledger one of the bot's own ``workflows`` uploaded, or None."""
    if artifact.expired:
        return f"artifact {artifact.name} has expired"
    if artifact.run_id is None:
        return f"artifact {artifact.name} names no workflow run"
    run = api.workflow_run(artifact.run_id)
    events = ("issue_comment", "push", "workflow_run")
    return own_run_problem(run, workflows, events, api.repository, default_branch)


def read_ledger(api: GitHubApi, artifact: Artifact, digest: str | None) -> bytes:
    """The ledger file inside ``artifact``; with ``digest``, it must have that sha256."""
    folder = Path(_scratch()) / str(artifact.id)
    unpack(api.download_artifact(artifact.id, MAX_ZIP), folder)
    path = folder / LEDGER_FILE
    if not path.is_file():
        raise ArtifactError(f"artifact {artifact.name} holds no {LEDGER_FILE}")
    data = path.read_bytes()
    if digest is not None and sha256(data) != digest:
        raise ArtifactError(f"artifact {artifact.name} holds a ledger whose sha256 is not {digest}")
    return data


def fetch_pr_ledger(
    api: GitHubApi, replies: list[Reply], config: BotConfig, dest: Path
) -> tuple[bool, list[str]]:
    """Write the ledger the bot's newest reply vouches for to ``dest``: (found, what happened)."""
    from stagebot.bot.marker import find_ledger_digests

    default_branch = api.default_branch()
    workflows = (config.workflow, config.report_workflow)
    notes: list[str] = []
    for reply in sorted(replies, key=lambda r: r.comment.id, reverse=True)[:CANDIDATES]:
        for digest in sorted(find_ledger_digests(reply.comment.body)):
            for artifact in api.artifacts_named(ledger_artifact(digest))[:CANDIDATES]:
                data, why = _checked_ledger(
                    api, artifact, config, default_branch, workflows, digest
                )
                if why is not None:
                    notes.append(f"skipped: {why}")
                    continue
                _write(dest, data)
                notes.append(
                    f"took the ledger of reply {reply.comment.id} (sha256 {digest[:12]}…) from "
                    f"run {artifact.run_id}"
                )
                return True, notes
    notes.append("no ledger the bot vouched for was found: the pipeline starts without history")
    return False, notes


def _checked_ledger(
    api: GitHubApi,
    artifact: Artifact,
    config: BotConfig,
    default_branch: str,
    workflows: tuple[str, ...],
    digest: str | None,
) -> tuple[bytes, None] | tuple[None, str]:
    """The artifact's ledger when a run of the bot's ``workflows`` uploaded it (and its bytes
    have ``digest``, when given), else why it is not taken."""
    why = bots_ledger_problem(api, artifact, config, default_branch, workflows)
    if why is not None:
        return None, why
    try:
        return read_ledger(api, artifact, digest), None
    except ArtifactError as error:
        return None, str(error)


def fetch_main_ledger(api: GitHubApi, config: BotConfig, dest: Path) -> tuple[bool, list[str]]:
    """Write main's newest ledger that a report run of the bot uploaded to ``dest``."""
    default_branch = api.default_branch()
    notes: list[str] = []
    for artifact in api.artifacts_named(MAIN_LEDGER)[:CANDIDATES]:
        workflows = (config.report_workflow,)
        data, why = _checked_ledger(api, artifact, config, default_branch, workflows, None)
        if why is not None:
            notes.append(f"skipped: {why}")
            continue
        _write(dest, data)
        notes.append(f"took main's ledger from run {artifact.run_id} (artifact {artifact.id})")
        return True, notes
    notes.append("no main ledger from the bot's report runs was found")
    return False, notes


def _write(dest: Path, data: bytes) -> None:
    from stagebot.bot.ledger_files import side_files

    dest.parent.mkdir(parents=True, exist_ok=True)
    for side in side_files(dest):
        side.unlink(missing_ok=True)
    dest.write_bytes(data)


def _scratch() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="stagebot-artifact-")
