"""Path-rule patterns: gitignore semantics (pathspec) over repository-relative paths."""

from __future__ import annotations

import pytest

from stagebot.stages.patterns import check_path_pattern, path_matches


@pytest.mark.parametrize(
    ("patterns", "path", "matches"),
    [
        pytest.param(["*.md"], "README.md", True, id="*.md at the top"),
        pytest.param(["*.md"], "docs/guide/a.md", True, id="no slash: any depth"),
        pytest.param(["docs/**"], "docs/a/b.py", True, id="** spans segments"),
        pytest.param(["docs/**"], "x/docs/a.py", False, id="a slash anchors at the root"),
        pytest.param(["docs/"], "docs/a/b.py", True, id="trailing slash: the whole folder"),
        pytest.param(["docs/"], "docs.py", False, id="trailing slash: not a file's prefix"),
        pytest.param(["src/*.py"], "src/a/b.py", False, id="* stays in one segment"),
        pytest.param(["src/?.py"], "src/ab.py", False, id="? is one character"),
        pytest.param(["src/[ab].py"], "src/b.py", True, id="character class"),
        pytest.param(["**/*.md"], "a/b/c.md", True, id="**/ at the start"),
        pytest.param(["docs/**", "!docs/conf.py"], "docs/conf.py", False, id="! takes back"),
        pytest.param(["docs/**", "!docs/conf.py"], "docs/a.md", True, id="! takes back only it"),
        pytest.param(["tests/x.py"], "tests/x.pyc", False, id="a plain path is exact"),
    ],
)
def test_gitignore_semantics(patterns: list[str], path: str, matches: bool) -> None:
    assert path_matches(path, tuple(patterns)) is matches


@pytest.mark.parametrize("pattern", ["", "/docs/**", "!/docs", "!"])
def test_unusable_patterns_are_refused(pattern: str) -> None:
    with pytest.raises(ValueError, match="path pattern"):
        check_path_pattern(pattern)
