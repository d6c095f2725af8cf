"""The key lines of a real pytest failure, as the reply shows them."""

from __future__ import annotations

import os
import subprocess
import sys

from stagebot.harness.analysis.evidence import error_line
from stagebot.harness.analysis.key_lines import key_lines


def _pytest_log(tmp_path, body: str) -> str:
    """What pytest prints for a test file whose one test is ``body``."""
    (tmp_path / "test_one.py").write_text(f"import os\n\n\ndef test_one():\n    {body}\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_one.py"],
        cwd=tmp_path,
        env={**os.environ, "RUNNER_SECRETISH": "do-not-print-me"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    return done.stdout


def test_an_assertion_on_the_environment_names_the_variable_not_the_environment(tmp_path):
    lines = key_lines("AssertionError", _pytest_log(tmp_path, 'assert "NEEDED" in os.environ'))
    text = "\n".join(lines)
    assert "environ({…})" in text and "'NEEDED'" in text
    assert "do-not-print-me" not in text and "RUNNER_SECRETISH" not in text


def test_the_error_line_folds_the_environment_and_keeps_the_other_operand(tmp_path):
    """The reply's one-line evidence too; only the environment's repr is folded."""
    log = _pytest_log(tmp_path, 'assert os.environ == {"a": 1}')
    line = error_line(log)
    assert "environ({…}) == {'a': 1}" in line and "do-not-print-me" not in line
    assert any("environ({…}) == {'a': 1}" in k for k in key_lines(line, log))


def test_another_mapping_in_an_assertion_is_kept(tmp_path):
    """The control: only os.environ's repr is folded, a test's own dict is why it failed."""
    lines = key_lines("AssertionError", _pytest_log(tmp_path, 'assert {"a": 1} == {"a": 2}'))
    assert any("{'a': 1} == {'a': 2}" in line for line in lines), lines
