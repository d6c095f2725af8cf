"""Path patterns for ``run_if_changed`` / ``skip_if_only_changed`` and stage-name wildcards.

Path patterns are globs over repository-relative paths: ``*`` and ``?`` stay inside one path
segment, ``**`` spans segments (``docs/**`` matches everything under docs/), and a pattern ending
in ``/`` means everything under that folder.
"""

from __future__ import annotations

import fnmatch
import re
from functools import cache


@cache
def compile_path_pattern(pattern: str) -> re.Pattern[str]:
    if not pattern or pattern.startswith("/"):
        raise ValueError(f"path pattern {pattern!r} must be a non-empty repository-relative glob")
    if pattern.endswith("/"):
        pattern += "**"
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def path_matches(path: str, patterns: tuple[str, ...]) -> bool:
    return any(compile_path_pattern(pattern).match(path) for pattern in patterns)


def name_matches(name: str, pattern: str) -> bool:
    """Stage-name wildcard: ``*`` matches any run of characters; case matters."""
    return fnmatch.fnmatchcase(name, pattern)
