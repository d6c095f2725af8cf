"""SECURITY.md stays true in what a test can check: every control names tests that exist, and
the runner controls no code can enforce say what a personal repository can and cannot get."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECURITY = (ROOT / "SECURITY.md").read_text()


def controls() -> dict[str, str]:
    """Control number -> its row's last cell (the tests)."""
    rows = re.findall(r"^\| (\d+b?) \|.*\| ([^|]*) \|$", SECURITY, re.M)
    return dict(rows)


def named_tests(cell: str) -> list[tuple[str, str | None]]:
    """(file, test name or None for a whole file) in a control's test cell: `f.py::name`, and
    `::name` continuing the file named before it."""
    found, current = [], None
    for file, name in re.findall(r"`(?:(test_\w+\.py))?(?:::(\w+))?`", cell):
        current = file or current
        if current and (file or name):
            found.append((current, name or None))
    return found


def suite_file(name: str) -> Path | None:
    """The one file of this suite named ``name`` (tests/ mirrors the code: names are unique)."""
    found = [path for path in (ROOT / "tests").rglob(name) if "fixtures" not in path.parts]
    return found[0] if len(found) == 1 else None


def test_every_control_names_tests_that_exist() -> None:
    table = controls()
    assert len(table) >= 22, sorted(table)
    for number, cell in table.items():
        tests = named_tests(cell)
        assert tests, f"control {number} names no test"
        for file, name in tests:
            path = suite_file(file)
            assert path is not None, f"control {number}: no {file} (or more than one)"
            if name is not None:
                assert re.search(rf"^def {name}\(", path.read_text(), re.M), (
                    f"control {number}: {file} has no test {name}"
                )


def test_a_control_naming_a_missing_test_is_caught() -> None:
    """The check above can fail: a made-up name is not found."""
    cell = "`test_workflows.py::test_actionlint_finds_nothing`, `::test_no_such_thing`"
    missing = [
        name
        for file, name in named_tests(cell)
        if not re.search(rf"^def {name}\(", suite_file(file).read_text(), re.M)
    ]
    assert missing == ["test_no_such_thing"]


def test_it_says_what_a_personal_repository_can_and_cannot_get() -> None:
    """Issue 28, finding 9: the runner group is an organization's; say what to do without one."""
    section = SECURITY.split("## Runners on a personal repository", 1)[1].split("\n## ", 1)[0]
    for fact in (
        "Cannot: a runner group",
        "exist only for organizations",
        "Can: ephemeral and just-in-time runners",
        "generate-jitconfig",
        "move the repository to an organization",
        "require approval for every outside contributor",
    ):
        assert fact in section, fact


def test_it_claims_no_shard_isolation_within_a_stage_run() -> None:
    """Issue 28, finding 10: every job of a stage run can upload any `stagebot-result-<stage>`
    first, so SECURITY.md must not claim a job can never write another shard's result."""
    assert "never write another pipeline's or another shard's result" not in SECURITY
    assert "A stage job can write any shard's result of its own stage run" in SECURITY


def test_it_lists_exactly_the_zizmor_ignores_the_workflows_carry() -> None:
    from helpers.zizmor_ignores import IGNORES

    section = SECURITY.split("## zizmor ignores", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([\w.]+\.yml)` \| `([\w-]+)` \|", section, re.M))
    assert listed == set(IGNORES)
