"""The plugin's executor options: the JSONL stream, waives, select / deselect, usage errors."""

from __future__ import annotations

import json

import pytest

pytest_plugins = ["pytester"]
PLUGIN = ("-p", "stagebot.harness.run.pytest_plugin")  # as a shard names it: no entry point

SUITE = """
import pytest

def test_pass():
    pass

def test_fail():
    assert 1 == 2, "one is not two"

@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")

def test_setup_error(broken):
    pass

def test_skip():
    pytest.skip("no GPU here")

def test_waived():
    raise AssertionError("never runs")
"""


def records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_stream_has_a_start_and_a_result_per_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    waives = pytester.path / "waives.json"
    waives.write_text(json.dumps([{"test_id": "test_suite.py::test_waived", "reason": "bug 9"}]))
    stream = pytester.path / "tests.jsonl"
    result = pytester.runpytest_subprocess(
        *PLUGIN, f"--stagebot-jsonl={stream}", f"--stagebot-waives={waives}"
    )
    result.assert_outcomes(passed=1, failed=1, errors=1, skipped=2)
    lines = records(stream)
    starts = [r["test_id"].split("::")[1] for r in lines if r["event"] == "start"]
    outcomes = {r["test_id"].split("::")[1]: r for r in lines if r["event"] == "result"}
    assert starts == ["test_pass", "test_fail", "test_setup_error", "test_skip", "test_waived"]
    assert {k: r["outcome"] for k, r in outcomes.items()} == {
        "test_pass": "passed",
        "test_fail": "failed",
        "test_setup_error": "error",
        "test_skip": "skipped",
        "test_waived": "waived",
    }
    assert "one is not two" in outcomes["test_fail"]["log"]
    assert outcomes["test_setup_error"]["phase"] == "setup"
    assert outcomes["test_waived"]["log"] == "bug 9"
    assert lines[-1] == {**lines[-1], "event": "session_end", "exitstatus": 1}


def test_select_and_deselect(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    keep = pytester.path / "keep.txt"
    keep.write_text("test_suite.py::test_pass\ntest_suite.py::test_fail\n")
    drop = pytester.path / "drop.txt"
    drop.write_text("test_suite.py::test_fail\n")
    result = pytester.runpytest_subprocess(
        *PLUGIN, f"--stagebot-select={keep}", f"--stagebot-deselect={drop}"
    )
    result.assert_outcomes(passed=1, deselected=4)


def test_a_missing_list_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess(*PLUGIN, "--stagebot-select=absent.txt")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*[[]stagebot[]] --stagebot-select absent.txt: no such file*"])


def test_without_options_nothing_is_registered(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_one="def test_x(request):\n"
        "    pm = request.config.pluginmanager\n"
        "    assert pm.get_plugin('stagebot-jsonl') is None\n"
        "    assert pm.get_plugin('stagebot-selection') is None\n"
    )
    pytester.runpytest_subprocess(*PLUGIN).assert_outcomes(passed=1)
