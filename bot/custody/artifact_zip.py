"""Unpacking an artifact's zip that untrusted code may have written: data only, never run.

Only regular files with plain relative names are written (no absolute path, no ``..``, no link,
no device); sizes are bounded before anything is written; a member that cannot be read (bad
CRC, broken compressed data, encrypted) makes the whole artifact an ArtifactError; with
``prefix``, only the members under that folder are kept. Everything left out is named, so the
report can say so.
"""

from __future__ import annotations

import io
import stat
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from stagebot.stages.errors import StagebotError

MAX_MEMBERS = 5000
MAX_UNPACKED = 2 << 30  # 2 GiB of logs and results per artifact
# what reading a damaged or unusual member raises: a bad CRC, broken deflate/bzip2/lzma data, a
# truncated member, an unsupported compression method, an encrypted member
CORRUPT = (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError, OSError)


class ArtifactError(StagebotError):
    """An artifact that is not a readable zip within the bot's limits."""


@dataclass
class Unpacked:
    kept: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # "name (why)"


def unpack(data: bytes | Path, dest: Path, prefix: str | None = None) -> Unpacked:
    """Write the artifact's acceptable members under ``dest`` (keeping their relative paths);
    ``data`` is the zip's bytes or the file it was downloaded to."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data) if isinstance(data, bytes) else data)
    except zipfile.BadZipFile as error:
        raise ArtifactError(f"not a zip archive ({error})") from None
    members = archive.infolist()
    if len(members) > MAX_MEMBERS:
        raise ArtifactError(f"{len(members)} members, more than the {MAX_MEMBERS} the bot reads")
    if sum(m.file_size for m in members) > MAX_UNPACKED:
        raise ArtifactError(f"unpacks to more than {MAX_UNPACKED} bytes")
    done = Unpacked()
    for member in members:
        if member.is_dir():
            continue
        why = _refusal(member, prefix)
        if why is not None:
            done.ignored.append(f"{member.filename} ({why})")
            continue
        try:
            with archive.open(member) as source:
                data = source.read(member.file_size + 1)[: member.file_size]
        except CORRUPT as error:
            raise ArtifactError(f"member {member.filename} cannot be read ({error})") from None
        target = dest.joinpath(*PurePosixPath(member.filename).parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        done.kept.append(member.filename)
    return done


def _refusal(member: zipfile.ZipInfo, prefix: str | None) -> str | None:
    name = member.filename
    path = PurePosixPath(name)
    kind = stat.S_IFMT(member.external_attr >> 16)  # 0: no Unix type recorded (a plain file)
    if "\\" in name or path.is_absolute() or ".." in path.parts or not path.parts:
        return "not a plain relative path"
    if kind not in (0, stat.S_IFREG):
        return "not a regular file"
    if prefix is not None and path.parts[0] != prefix:
        return f"outside {prefix}/"
    return None
