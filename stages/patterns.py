"""Path patterns for ``run_if_changed`` / ``skip_if_only_changed``, stage-name wildcards and the
test ids a waive names.

A rule's path patterns are one gitignore-style list (``pathspec``'s ``GitIgnoreSpec``), matched
against repository-relative paths: ``*`` and ``?`` stay inside one path segment, ``**`` spans
segments, ``[abc]`` is a character class; a pattern with a ``/`` before its end (``docs/**``,
``src/*.py``) is anchored at the repository root, one without (``*.md``, ``docs/``) matches at
any depth; a trailing ``/`` means everything under such a folder; ``!pattern`` takes back a path
that an earlier pattern of the list matched. A leading ``/`` is refused: every pattern is
repository-relative already.

A waive's pattern is a test id, or a prefix of one ending at a path or ``::`` boundary.
"""

from __future__ import annotations

import fnmatch
from functools import cache


def check_path_pattern(pattern: str) -> None:
    """Raise ValueError when ``pattern`` is no usable repository-relative pattern."""
    if not pattern or pattern.lstrip("!").startswith("/"):
        raise ValueError(
            f"path pattern {pattern!r} must be a non-empty repository-relative glob "
            "(gitignore syntax, e.g. docs/** or *.md)"
        )
    from pathspec import GitIgnoreSpec  # here, not at import: `bot dry-run` starts faster

    try:
        GitIgnoreSpec.from_lines([pattern])
    except ValueError as error:  # pathspec's pattern error
        raise ValueError(f"path pattern {pattern!r} is no gitignore pattern: {error}") from None


@cache
def _spec(patterns: tuple[str, ...]):
    from pathspec import GitIgnoreSpec

    return GitIgnoreSpec.from_lines(patterns)


def path_matches(path: str, patterns: tuple[str, ...]) -> bool:
    return _spec(tuple(patterns)).match_file(path)


def waive_matches(test_id: str, waived: str) -> bool:
    """A waive names a test id, or a prefix of it ending at a path or ``::`` boundary."""
    return test_id == waived or any(test_id.startswith(waived + sep) for sep in ("::", "[", "/"))


def name_matches(name: str, pattern: str) -> bool:
    """Stage-name wildcard: ``*`` matches any run of characters; case matters."""
    return fnmatch.fnmatchcase(name, pattern)
