"""Unpacking an artifact PR code wrote: only plain relative regular files, within bounds, and
with a prefix only that folder's files; everything else is named, never written."""

from __future__ import annotations

import io
import stat
import zipfile
from pathlib import Path

import pytest
from helpers.zips import corrupt

from stagebot.bot.custody import artifact_zip
from stagebot.bot.custody.artifact_zip import ArtifactError, unpack


def _zip(*members: tuple[str, bytes, int | None]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data, mode in members:
            info = zipfile.ZipInfo(name)
            if mode is not None:
                info.external_attr = mode << 16
            archive.writestr(info, data)
    return buffer.getvalue()


def test_only_plain_files_under_the_prefix_are_written(tmp_path: Path) -> None:
    data = _zip(
        ("A/result.json", b"{}", None),
        ("A/logs/log.txt", b"log", stat.S_IFREG | 0o644),
        ("B/result.json", b"forged", None),
        ("../escape.txt", b"x", None),
        ("/etc/passwd", b"x", None),
        ("A\\..\\win.txt", b"x", None),
        ("A/link", b"/etc/shadow", stat.S_IFLNK | 0o777),
    )
    done = unpack(data, tmp_path / "out", prefix="A")
    assert done.kept == ["A/result.json", "A/logs/log.txt"]
    assert done.ignored == [
        "B/result.json (outside A/)",
        "../escape.txt (not a plain relative path)",
        "/etc/passwd (not a plain relative path)",
        "A\\..\\win.txt (not a plain relative path)",
        "A/link (not a regular file)",
    ]
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == ["out/A/logs/log.txt", "out/A/result.json"]


def test_a_damaged_or_oversized_archive_is_one_error(tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(ArtifactError, match="not a zip archive"):
        unpack(b"PK\x03\x04 truncated", tmp_path)
    monkeypatch.setattr(artifact_zip, "MAX_UNPACKED", 10)
    with pytest.raises(ArtifactError, match="unpacks to more than 10 bytes"):
        unpack(_zip(("a", b"x" * 11, None)), tmp_path)
    monkeypatch.setattr(artifact_zip, "MAX_MEMBERS", 1)
    with pytest.raises(ArtifactError, match="2 members, more than the 1"):
        unpack(_zip(("a", b"", None), ("b", b"", None)), tmp_path)
    assert list(tmp_path.iterdir()) == []


def _deflated(name: str, payload: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(name, payload)
    return buffer.getvalue()


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(corrupt(_zip(("A/result.json", b"{}" * 50, None)), "A/result.json"), id="CRC"),
        pytest.param(
            corrupt(_deflated("A/result.json", b"x" * 5000), "A/result.json"), id="deflate"
        ),
    ],
)
def test_a_member_with_bad_data_is_an_artifact_error_not_a_crash(tmp_path: Path, data) -> None:
    """Issue 28, finding 7: zipfile raises BadZipFile or zlib.error only when the member is read."""
    with pytest.raises(ArtifactError, match="member A/result.json cannot be read"):
        unpack(data, tmp_path, prefix="A")
