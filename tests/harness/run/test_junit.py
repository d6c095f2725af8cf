"""The shard's merged JUnit file: well-formed whatever the evidence holds, and read back whole."""

from __future__ import annotations

from xml.etree import ElementTree

from stagebot.harness.results import TestOutcome as Outcome
from stagebot.harness.run.junit import read_junit, write_junit, xml_text

RED, RESET = "\x1b[31m", "\x1b[0m"


def test_ansi_colours_and_control_characters_keep_the_file_well_formed(tmp_path) -> None:
    tests = [
        Outcome("t/test_a.py::test_red", "failed", 1.25, f"{RED}AssertionError{RESET}: 1 != 2"),
        Outcome("t/test_a.py::test_bell", "error", 0.5, "RuntimeError: bell\x07 nul\x00 end"),
        Outcome("t/test_a.py::test_ok", "passed", 0.1),
        Outcome("t/test_a.py::test_flaky", "flaky", 0.2, "passed on re-run 1", attempts=2),
        Outcome("t/test_b.py::test_waived", "waived", 0.0, "bug 7 \x1b[1mbold\x1b[22m"),
    ]
    path = tmp_path / "junit.xml"
    write_junit(path, "CPU-PyTorch-1", tests)
    suite = ElementTree.parse(path).getroot()  # a strict parser: any illegal character fails
    assert {k: suite.get(k) for k in ("name", "tests", "failures", "errors", "skipped")} == {
        "name": "CPU-PyTorch-1",
        "tests": "5",
        "failures": "1",
        "errors": "1",
        "skipped": "1",
    }
    flaky = suite.find("testcase[@name='test_flaky']/properties/property")
    assert (flaky.get("name"), flaky.get("value")) == ("flaky", "2")
    read = {case.test_id: case for case in read_junit(path)}
    assert {test_id: case.outcome for test_id, case in read.items()} == {
        "t/test_a.py::test_red": "failed",
        "t/test_a.py::test_bell": "error",
        "t/test_a.py::test_ok": "passed",
        "t/test_a.py::test_flaky": "passed",
        "t/test_b.py::test_waived": "skipped",
    }
    assert read["t/test_a.py::test_red"].message == "AssertionError: 1 != 2"
    assert read["t/test_a.py::test_bell"].message == "RuntimeError: bell\\x07 nul\\x00 end"
    assert read["t/test_b.py::test_waived"].message == "bug 7 bold"
    assert read["t/test_a.py::test_red"].duration_s == 1.25


def test_xml_text_keeps_what_xml_allows() -> None:
    assert xml_text("tab\there\nnewline é ✓ \u2028") == "tab\there\nnewline é ✓ \u2028"
    assert xml_text("\x1b[1;32mok\x1b[0m \x1b7saved\x1b8") == "ok saved"
    assert xml_text("lone \udc80 surrogate \x0b") == "lone \\udc80 surrogate \\x0b"
