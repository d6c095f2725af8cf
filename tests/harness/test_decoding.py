"""Bytes that are not UTF-8 (a file name from ``os.listdir``, a C extension's message) in a test's
id, message and output: every path keeps the result and shows each such byte as ``\\xNN``."""

from __future__ import annotations

import json
import sqlite3
import textwrap

from fixtures.botrun import bot

from stagebot.harness.decoding import clean, clean_json, text_of

CATALOG = """\
gpu_types:
  CPU:
    device_names: []
    runner_labels: [ubuntu-latest]
families:
  - name: CPU-PyTorch-Files
    kind: test
    timeout_minutes: 5
    max_reruns: 0
    suites: [{path: tests}]
"""
# The test names a file whose name is not UTF-8: its id, its error and its stderr carry the byte.
TEST = """
import os, sys
import pytest

NAME = os.fsdecode(b"caf\\xe9.txt")


@pytest.mark.parametrize("name", [NAME])
def test_reads_the_data_file(tmp_path, name):
    (tmp_path / name).write_bytes(b"1")
    print("listing:", os.listdir(tmp_path), file=sys.stderr)
    raise FileNotFoundError(f"no loader for {name}")
"""


def test_the_policy() -> None:
    assert text_of(b"caf\xe9 ok \xc3\xa9") == "caf\\xe9 ok é"
    assert clean("caf\udce9 \ud800 é") == "caf\\xe9 \\ud800 é"
    assert clean_json({"k\udce9": ["v\udcff", 1, None]}) == {"k\\xe9": ["v\\xff", 1, None]}


def test_bytes_that_are_not_utf8_reach_every_output(tmp_path) -> None:
    repo = tmp_path / "repo"
    (repo / "ci").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "ci" / "stages.yaml").write_text(CATALOG)
    (repo / "tests" / "check_files.py").write_text(textwrap.dedent(TEST))
    ini = '[tool.pytest.ini_options]\npython_files = ["check_*.py"]\n'
    (repo / "pyproject.toml").write_text(ini)
    ledger, out = tmp_path / "ledger.sqlite", tmp_path / "out"
    done = bot(
        "run", "--catalog", str(repo / "ci"), "--ledger", str(ledger), "--root", str(repo),
        "--out", str(out), "--commit", "c1", '/bot run --stage-list "CPU-PyTorch-Files-1"',
    )  # fmt: skip
    # the test's failure (1), not "stagebot failed unexpectedly" (3) with nothing recorded
    assert done.returncode == 1, done.stdout + done.stderr
    shown = "caf\\xe9"
    assert shown in done.stdout  # the reply, as GitHub would get it
    with sqlite3.connect(ledger) as db:
        (test_id, evidence, log) = db.execute("SELECT test_id, evidence, log FROM tests").fetchone()
    assert shown in evidence and shown in log
    assert test_id == "tests/check_files.py::test_reads_the_data_file[caf\\udce9.txt]"  # pytest's
    for name in ("report.md", "report.html", "CPU-PyTorch-Files-1/junit.xml"):
        assert shown in (out / name).read_text(encoding="utf-8"), name
    report = json.loads(bot("report", "--ledger", str(ledger), "--format", "json").stdout)
    (failure,) = report["failures"]
    assert shown in failure["evidence"] and failure["category"] == "UNCLASSIFIED"
