"""The order `-n N --dist loadfile` hands out this suite's files in: slow files first
(tests/helpers/file_order.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers.file_order import slow_files_first

pytest_plugins = ["pytester"]
TESTS = Path(__file__).resolve().parent


@dataclass
class Item:
    nodeid: str
    marks: set[str] = field(default_factory=set)

    def get_closest_marker(self, name: str) -> str | None:
        return name if name in self.marks else None


def test_slow_files_go_first_each_file_together_in_its_given_order() -> None:
    items = [
        Item("a.py::t1"),
        Item("b.py::t1"),
        Item("slow_one.py::t2", {"slow"}),
        Item("a.py::t2"),
        Item("slow_one.py::t1"),  # unmarked, but its file has a slow test
        Item("c.py::t1"),
        Item("slow_two.py::t1", {"slow"}),
        Item("slow_two.py::t2", {"slow"}),
        Item("d.py::t1"),
        Item("slow_two.py::t3", {"slow"}),
    ]
    ids = [item.nodeid for item in slow_files_first(items)]
    assert ids == [
        "slow_two.py::t1",  # slow ones first, most tests first
        "slow_two.py::t2",
        "slow_two.py::t3",
        "slow_one.py::t2",
        "slow_one.py::t1",
        "a.py::t1",
        "a.py::t2",
        "b.py::t1",  # a tie keeps the given order
        "c.py::t1",
        "d.py::t1",
    ]


@pytest.mark.slow
def test_the_workers_are_handed_the_slow_file_first(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers, three files: xdist alone would hand out the two files with more tests first
    and the slow one, with a single test, after them."""
    log = pytester.path / "log.txt"
    body = (
        "import os\n"
        "def record(name):\n"
        f"    with open({str(log)!r}, 'a') as out:\n"
        "        out.write(os.environ['PYTEST_XDIST_WORKER'] + ' ' + name + '\\n')\n"
    )
    tests = {"many": 6, "few": 4, "slow": 1}
    for name, count in tests.items():
        mark = "import pytest\npytestmark = pytest.mark.slow\n" if name == "slow" else ""
        cases = "".join(f"def test_{i}():\n    record('{name}')\n" for i in range(count))
        pytester.makepyfile(**{f"test_{name}": mark + body + cases})
    pytester.makeini("[pytest]\nmarkers = slow: slow\n")
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    done = pytester.runpytest_subprocess(
        "-n", "2", "--dist", "loadfile", "-p", "helpers.file_order", "-p", "no:randomly"
    )
    done.assert_outcomes(passed=sum(tests.values()))
    runs = [line.split() for line in log.read_text().splitlines()]
    (worker,) = {w for w, name in runs if name == "slow"}
    assert [name for w, name in runs if w == worker][0] == "slow", runs
