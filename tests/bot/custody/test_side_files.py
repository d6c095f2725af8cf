"""The promise of a ledger's digest, stated as properties (issue 50): a digest vouches for a
restored ledger only when no side file beside it could change it on open (a -wal or -journal
with content, or any side file that is not a regular file: SQLite would follow a link or block
on a FIFO; an empty -wal and a -shm change nothing), and only when the bot recorded it; the
plan artifact's digest tells an absent file from an empty one and a link from its target."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stagebot.bot.custody.files import (
    artifact_digest,
    file_digest,
    planted_side_files,
    unvouched_reason,
)

SUFFIXES = ("-wal", "-shm", "-journal")
KINDS = ("absent", "empty", "one byte", "content", "symlink", "fifo")
WHERE = "the bot's replies on this PR"


def lay(ledger: Path, suffix: str, kind: str) -> None:
    side = ledger.with_name(ledger.name + suffix)
    if kind == "empty":
        side.write_bytes(b"")
    elif kind == "one byte":
        side.write_bytes(b"p")
    elif kind == "content":
        side.write_bytes(b"pages")
    elif kind == "symlink":
        (ledger.parent / "elsewhere").write_bytes(b"")
        side.symlink_to(ledger.parent / "elsewhere")
    elif kind == "fifo":
        os.mkfifo(side)


def could_change(suffix: str, kind: str) -> bool:
    return kind in ("symlink", "fifo") or (kind in ("one byte", "content") and suffix != "-shm")


@settings(max_examples=60, deadline=None)
@given(
    sides=st.fixed_dictionaries({suffix: st.sampled_from(KINDS) for suffix in SUFFIXES}),
    recorded=st.booleans(),
)
def test_a_digest_vouches_only_for_a_recorded_ledger_with_no_side_file_that_changes_it(
    tmp_path_factory, sides, recorded
) -> None:
    folder = tmp_path_factory.mktemp("restored")
    ledger = folder / "ledger.sqlite"
    ledger.write_bytes(b"SQLite format 3\0 and its pages")
    for suffix, kind in sides.items():
        lay(ledger, suffix, kind)
    asked = []

    def digests() -> set[str]:
        asked.append(True)
        return {file_digest(ledger)} if recorded else {"0" * 64}

    planted = [ledger.name + s for s in SUFFIXES if could_change(s, sides[s])]
    assert planted_side_files(ledger) == planted
    why = unvouched_reason(ledger, digests, WHERE)
    if planted:
        assert why == f"{', '.join(planted)} lay beside it"
        assert not asked, "the side files decide: the records are not read"
    elif recorded:
        assert why is None
    else:
        assert why == f"its sha256 is in none of {WHERE}"


@pytest.mark.parametrize("size", [0, 1, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, 3 << 20])
def test_a_files_digest_is_the_sha256_of_its_bytes(tmp_path, size) -> None:
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    (tmp_path / "f").write_bytes(data)
    assert file_digest(tmp_path / "f") == hashlib.sha256(data).hexdigest()


def test_the_artifact_digest_tells_absent_from_empty_and_a_link_from_its_target(tmp_path):
    plan, other = tmp_path / "plan.json", tmp_path / "other.json"
    absent = artifact_digest([plan])
    plan.write_bytes(b"")
    empty = artifact_digest([plan])
    other.write_bytes(b"")
    plan.unlink()
    plan.symlink_to(other)
    linked = artifact_digest([plan])
    assert len({absent, empty, linked}) == 3
    assert artifact_digest([other]) != artifact_digest([plan])  # the names count too
