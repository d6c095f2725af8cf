"""An xfailed test is recorded as ``xfailed``: never as passed, so never reused as passed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
from helpers.shards import entry

from stagebot.harness.ledger.book import Ledger
from stagebot.harness.run.junit import read_junit
from stagebot.harness.run.shard import ShardContext, run_shard

ROOT = Path(__file__).resolve().parents[3]
SUITE = """import pytest

def test_ok():
    assert True

@pytest.mark.xfail(reason="known bug 42")
def test_known_bug():
    assert False
"""


def test_an_xfailed_test_is_recorded_xfailed_and_not_reused_as_passed(tmp_path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "check_suite.py").write_text(SUITE)
    context = ShardContext(out_dir=tmp_path / "out", root=root, python=sys.executable)
    result = run_shard(entry(), context)
    outcomes = {t.test_id: (t.outcome, t.evidence) for t in result.tests}
    assert result.state == "SUCCESS"
    assert outcomes == {
        "check_suite.py::test_ok": ("passed", None),
        "check_suite.py::test_known_bug": ("xfailed", "xfailed: known bug 42"),
    }
    schema = json.loads((ROOT / "harness/schemas/stage_result.v1.json").read_text())
    jsonschema.validate(result.to_json(), schema)
    junit = {c.test_id: c.outcome for c in read_junit(tmp_path / "out" / "junit.xml")}
    assert junit["check_suite.py::test_known_bug"] == "xfailed"
    with Ledger.open(tmp_path / "ledger.sqlite") as book:
        number = book.start_pipeline(command={"version": 1}, commit="c0ffee")
        book.record_result(number, result)
        assert set(book.passed_tests(number, result.stage)) == {"check_suite.py::test_ok"}
        outcomes = book.test_outcomes(number)
        assert outcomes[("CPU-PyTorch", "check_suite.py::test_known_bug")].outcome == "xfailed"
