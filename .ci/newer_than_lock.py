"""Prints each distribution installed here at another version than the lock's (argument: a lock
file): "transformers 5.26.0 (lock: 5.25.0)", one a line, nothing when all agree."""

import re
import sys
from importlib import metadata
from pathlib import Path

from packaging.utils import canonicalize_name

PIN = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)==(?P<version>\S+)", re.M)


def differences(lock: str) -> list[str]:
    pinned = {canonicalize_name(m["name"]): m["version"] for m in PIN.finditer(lock)}
    lines = []
    for dist in metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        if name in pinned and dist.version != pinned[name]:
            lines.append(f"{name} {dist.version} (lock: {pinned[name]})")
    return sorted(lines)


if __name__ == "__main__":
    print("\n".join(differences(Path(sys.argv[1]).read_text(encoding="utf-8"))))
