"""The promises of the ledger's custody, stated as properties (issue 50):

- the report job publishes only the plan artifact the plan job left: any recorded digest but
  the artifact's own, the empty one included (a plan job output that never arrived), stops the
  publishing before anything is read or written;
- a restored ledger is used only when its digest is among those the bot recorded, and no side
  file lies beside it; else it is moved aside and the pipeline starts empty, saying so."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stagebot.bot.actions.publishing import PublishRequest, publish
from stagebot.bot.custody.files import artifact_digest, artifact_files, file_digest
from stagebot.bot.custody.trust import ArtifactMismatch, RestoredLedger, check_plan_artifact
from stagebot.harness.ledger.book import Ledger


def artifact(folder: Path, plan: bytes = b'{"plan": 1}') -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    plan_path, ledger = folder / "plan.json", folder / "ledger.sqlite"
    plan_path.write_bytes(plan)
    Ledger.open(ledger).close()
    return plan_path, ledger


def digest_of(plan_path: Path, ledger: Path) -> str:
    return artifact_digest(artifact_files(plan_path, ledger))


@settings(max_examples=60, deadline=None)
@given(
    expected=st.one_of(
        st.just(""), st.text(max_size=70), st.from_regex(r"[0-9a-f]{64}", fullmatch=True)
    )
)
def test_only_the_artifacts_own_digest_lets_it_through(tmp_path_factory, expected) -> None:
    plan_path, ledger = artifact(tmp_path_factory.mktemp("artifact"))
    actual = digest_of(plan_path, ledger)
    if expected == actual:
        check_plan_artifact(expected, plan_path, ledger)
    else:
        with pytest.raises(ArtifactMismatch, match="was replaced or damaged"):
            check_plan_artifact(expected, plan_path, ledger)
    check_plan_artifact(actual, plan_path, ledger)


@pytest.mark.parametrize("change", ["plan", "ledger", "side file", "symlink"])
def test_any_change_to_the_artifact_is_caught(tmp_path: Path, change: str) -> None:
    plan_path, ledger = artifact(tmp_path)
    recorded = digest_of(plan_path, ledger)
    if change == "plan":
        plan_path.write_bytes(b'{"plan": 2}')
    elif change == "ledger":
        ledger.write_bytes(ledger.read_bytes() + b"\0")
    elif change == "side file":
        ledger.with_name(ledger.name + "-wal").write_bytes(b"")
    else:
        plan_path.rename(tmp_path / "elsewhere.json")
        plan_path.symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(ArtifactMismatch):
        check_plan_artifact(recorded, plan_path, ledger)


def test_an_empty_recorded_digest_publishes_nothing(tmp_path: Path) -> None:
    """The plan job's output reached the report job empty: nothing vouches for the artifact, so
    `bot publish` stops before it connects to GitHub or opens the ledger."""
    plan_path, ledger = artifact(tmp_path)
    before = file_digest(ledger)
    request = PublishRequest(
        pipeline=1,
        results=tmp_path / "results",
        ledger=ledger,
        plan_path=plan_path,
        artifact_digest="",
    )
    with pytest.raises(ArtifactMismatch, match=r"not the \(empty\)"):
        publish(request, env=None, config=None)
    assert file_digest(ledger) == before


@settings(max_examples=25, deadline=None)
@given(recorded=st.sets(st.sampled_from(["own", "other", "empty"]), max_size=3))
def test_a_restored_ledger_is_used_only_when_the_bot_recorded_its_digest(
    tmp_path_factory, recorded
) -> None:
    folder = tmp_path_factory.mktemp("restored")
    path = folder / "ledger.sqlite"
    with Ledger.open(path) as book:
        book.start_pipeline(command={"version": 1, "command": "run", "options": {}}, commit="c1")
    digests = {"own": file_digest(path), "other": "0" * 64, "empty": ""}
    restored = RestoredLedger(path, trusted=lambda: {digests[name] for name in recorded})
    book = restored.get()
    kept = book.latest_number() is not None
    restored.close()
    assert kept == ("own" in recorded)
    moved = list(folder.glob("ledger.sqlite.rejected-*"))
    assert bool(moved) == (not kept)
    assert (restored.notice is None) == kept
