"""The project's pytest plugin, where it is named (``-p``: each shard, stagebot's own sessions),
registers every suite's options wherever pytest runs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from stagebot.harness.run.pytest_plugin import SUITE_OPTIONS

pytest_plugins = ["pytester"]

PLUGIN = ("-p", "stagebot.harness.run.pytest_plugin")  # no entry point loads it
SUITE_FLAGS = [
    "--sharding-ir-model-id",
    "--sharding-ir-dist-config",
    "--moe-backend",
    "--cute-tactic",
]


def test_every_suite_option_is_known(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess(*PLUGIN, "--help")
    assert result.ret == 0
    for flag in SUITE_FLAGS:
        result.stdout.fnmatch_lines([f"*{flag}*"])


def test_suite_options_parse_outside_the_repo(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_one="""
        def test_options(request):
            assert request.config.getoption("moe_backend") == "reference"
            assert request.config.getoption("sharding_ir_dist_config") == ["tep"]
    """
    )
    result = pytester.runpytest_subprocess(
        *PLUGIN, "--moe-backend", "reference", "--sharding-ir-dist-config", "tep"
    )
    result.assert_outcomes(passed=1)


def test_an_unknown_option_is_still_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_one="def test_x(): pass")
    result = pytester.runpytest_subprocess(*PLUGIN, "--moe-backnd", "x")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


@pytest.mark.parametrize("module", SUITE_OPTIONS.values())
def test_options_modules_are_light(module: str) -> None:
    code = f"import sys, {module}; print('torch' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"
