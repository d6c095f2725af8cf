"""How the ledgers travel between pipelines: as artifacts of the bot's own privileged runs.

Only runs that execute default-branch code and no PR code upload them (the plan job of bot.yml
and the report job of report.yml), so no PR code can write one; PR code runs in stage runs,
which the bot never takes a ledger from. The name carries the file's sha256
(``stagebot-ledger-<sha256>``), and the bot's replies record the digest of the ledger each of
its jobs left and the run that uploads it; the plan job takes the one the newest such reply
names from that run's own artifact list (never a repository-wide search by name: names are
public and any workflow can upload under them), checks the run is one of the bot's own and the
file's sha256. Main's ledger (post-merge history, the base of PR failure analysis) is
``stagebot-ledger-main``, uploaded by report runs; the report records its digest and run in the
``stagebot/ledger`` status of the pipeline's commit (bot/custody/main_ledger.py), and the fetch
walks the default branch's newest commits to the first such status. Nothing is restored from the
Actions cache.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from stagebot.bot.config import BotConfig
from stagebot.bot.custody.artifact_zip import ArtifactError, unpack
from stagebot.bot.github import Artifact, Comment, GitHubApi
from stagebot.bot.protocols.names import MAIN_LEDGER, ledger_artifact
from stagebot.bot.protocols.runs import own_run_problem
from stagebot.stages.errors import StagebotError

LEDGER_FILE = "ledger.sqlite"
MAX_ZIP = 512 << 20
CANDIDATES = 10  # how many replies / main commits are tried before starting empty


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
    folder.mkdir()
    archive = folder / "artifact.zip"
    api.download_artifact(artifact.id, MAX_ZIP, archive)
    folder = folder / "files"
    unpack(archive, folder)
    path = folder / LEDGER_FILE
    if not path.is_file():
        raise ArtifactError(f"artifact {artifact.name} holds no {LEDGER_FILE}")
    data = path.read_bytes()
    if digest is not None and sha256(data) != digest:
        raise ArtifactError(f"artifact {artifact.name} holds a ledger whose sha256 is not {digest}")
    return data


class UnverifiedHistory(StagebotError):
    """The newest reply that names a ledger names one that fails its check: the PR's history
    cannot be verified, and no older reply's ledger may stand in for it (a rollback)."""


def fetch_pr_ledger(
    api: GitHubApi, replies: list[Comment], config: BotConfig, dest: Path
) -> tuple[bool, list[str]]:
    """Write the ledger the bot's newest reply (of ``replies``, the bot's own comments) vouches
    for to ``dest``: (found, what happened).
    The reply names the digest and the run that uploaded it; only that run's own artifacts are
    read (a search by name would take whatever any workflow uploaded under the public name).
    Only the newest reply that names a ledger counts: when its ledger cannot be had or fails its
    check, ``UnverifiedHistory`` says why. An older reply's ledger is never taken instead: it
    would forget what the newer pipelines recorded (a later FAILURE reused as a pass)."""
    from stagebot.bot.protocols.marker import find_ledger_record

    default_branch = api.default_branch()
    workflows = (config.workflow, config.report_workflow)
    for reply in sorted(replies, key=lambda r: r.id, reverse=True)[:CANDIDATES]:
        record = find_ledger_record(reply.body)
        if record is None:
            continue
        if record.run_id is None:
            raise UnverifiedHistory(
                f"the bot's newest reply that names a ledger (reply {reply.id}) names no run "
                "that uploaded it"
            )
        name = ledger_artifact(record.digest)
        data, why = _from_run(
            api, record.run_id, name, config, default_branch, workflows, record.digest
        )
        if why is not None:
            raise UnverifiedHistory(
                f"the bot's newest reply that names a ledger (reply {reply.id}) names the "
                f"ledger with sha256 {record.digest[:12]}… of run {record.run_id}, and {why}"
            )
        _write(dest, data)
        return True, [
            f"took the ledger of reply {reply.id} (sha256 {record.digest[:12]}…) from "
            f"run {record.run_id}"
        ]
    return False, ["no ledger the bot vouched for was found: the pipeline starts without history"]


def _from_run(
    api: GitHubApi,
    run_id: int,
    name: str,
    config: BotConfig,
    default_branch: str,
    workflows: tuple[str, ...],
    digest: str,
) -> tuple[bytes, None] | tuple[None, str]:
    """The ledger in run ``run_id``'s own artifact ``name`` when that run is one of the bot's
    ``workflows`` and the bytes have ``digest``; else why it is not taken."""
    found = [a for a in api.run_artifacts(run_id) if a.name == name]
    if not found:
        return None, f"run {run_id} has no artifact {name}"
    why = bots_ledger_problem(api, found[0], config, default_branch, workflows)
    if why is not None:
        return None, why
    try:
        return read_ledger(api, found[0], digest), None
    except ArtifactError as error:
        return None, str(error)


def fetch_main_ledger(api: GitHubApi, config: BotConfig, dest: Path) -> tuple[bool, list[str]]:
    """Write main's newest ledger to ``dest``: the one the ``stagebot/ledger`` status of the
    newest of the default branch's last CANDIDATES commits names (digest and report run), read
    from that run's own artifacts. Statuses need ``statuses: write`` and main's commits a push,
    so neither can be planted by PR code."""
    from stagebot.bot.custody.main_ledger import LEDGER_STATUS, parse_description

    default_branch = api.default_branch()
    notes: list[str] = []
    for commit in api.branch_commits(default_branch, CANDIDATES):
        for status in api.statuses(commit, LEDGER_STATUS):
            record = parse_description(status.description)
            if record is None or record[1] is None:
                continue
            digest, run_id = record
            data, why = _from_run(
                api, run_id, MAIN_LEDGER, config, default_branch, (config.report_workflow,), digest
            )
            if why is not None:
                notes.append(f"skipped the ledger of {commit[:7]}: {why}")
                continue
            _write(dest, data)
            notes.append(f"took main's ledger of {commit[:7]} from run {run_id}")
            return True, notes
    notes.append(
        f"no main ledger from the bot's report runs was found (no {LEDGER_STATUS} status naming "
        f"one on the last {CANDIDATES} commits of {default_branch})"
    )
    return False, notes


def _write(dest: Path, data: bytes) -> None:
    from stagebot.bot.custody.files import side_files

    dest.parent.mkdir(parents=True, exist_ok=True)
    for side in side_files(dest):
        side.unlink(missing_ok=True)
    dest.write_bytes(data)


def _scratch() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="stagebot-artifact-")
