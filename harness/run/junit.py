"""JUnit XML: read pytest's files safely (defusedxml) and write a shard's merged file (junitparser).

Reading is tolerant in one way only: a missing file is reported as such; a truncated or corrupt
one raises ``JunitError`` naming the file and the parser's complaint, so the executor can mark
the shard ERROR with that evidence instead of trusting half a file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

from junitparser import Attr, Error, Failure, Properties, Property, Skipped, TestCase, TestSuite

from stagebot.harness.results import TestOutcome

# pytest marks an expected failure in its JUnit file as <skipped type="pytest.xfail">.
XFAIL_TYPE = "pytest.xfail"


class JunitError(Exception):
    """A JUnit file that cannot be parsed."""


@dataclass(frozen=True)
class JunitCase:
    test_id: str
    outcome: str  # passed | failed | error | skipped | xfailed
    duration_s: float
    message: str | None


def read_junit(path: Path) -> list[JunitCase] | None:
    """The test cases of a JUnit file; None when the file does not exist."""
    from defusedxml import ElementTree as SafeTree
    from defusedxml.common import DefusedXmlException

    if not path.exists():
        return None
    try:
        root = SafeTree.parse(str(path)).getroot()
    except (ElementTree.ParseError, DefusedXmlException) as error:
        raise JunitError(f"{path.name} is corrupt or truncated: {error}") from None
    cases = []
    for case in root.iter("testcase"):
        outcome, message = "passed", None
        for tag in ("failure", "error", "skipped"):
            child = case.find(tag)
            if child is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
                if tag == "skipped" and child.get("type") == XFAIL_TYPE:
                    outcome = "xfailed"
                message = child.get("message") or (child.text or "").strip()[:500] or None
                break
        cases.append(JunitCase(_test_id(case), outcome, float(case.get("time") or 0.0), message))
    return cases


def _test_id(case) -> str:
    """pytest's ``a.b.test_x.TestY`` classname + name back to ``a/b/test_x.py::TestY::name``."""
    classname, name = case.get("classname", ""), case.get("name", "")
    file = case.get("file")
    parts = classname.split(".") if classname else []
    if not classname and "::" not in name and "/" not in name and not file:
        return name.replace(".", "/") + ".py"  # a collection error: pytest names the module
    if file:
        module_parts = Path(file).with_suffix("").parts
        rest = parts[len(module_parts) :]
        return "::".join([file, *rest, name])
    for cut in range(len(parts), 0, -1):
        if parts[cut - 1].startswith(("test", "check")):
            return "::".join(["/".join(parts[:cut]) + ".py", *parts[cut:], name])
    return "::".join([*parts, name])


def write_junit(path: Path, suite_name: str, tests: list[TestOutcome]) -> None:
    """Write the shard's final outcomes (reruns folded in) as one JUnit testsuite."""
    cases = []
    for test in tests:
        file, _, name = test.test_id.partition("::")
        classname = file.removesuffix(".py").replace("/", ".")
        case = _Case(xml_text(name or file), xml_text(classname), round(test.duration_s, 3))
        case.file = xml_text(file)
        message = xml_text(test.evidence or test.outcome)
        if test.outcome in ("failed", "error"):
            case.result = [(Failure if test.outcome == "failed" else Error)(message)]
        elif test.outcome in ("skipped", "waived"):
            case.result = [Skipped(message)]
        elif test.outcome == "xfailed":
            case.result = [Skipped(message, XFAIL_TYPE)]
        elif test.outcome == "flaky":
            properties = Properties()
            properties.add_property(Property("flaky", str(test.attempts)))
            case.append(properties)
        cases.append(case)
    suite = TestSuite(xml_text(suite_name))
    suite.add_testcases(cases)  # and the counts: tests, failures, errors, skipped, time
    suite.write(str(path), pretty=True)


def xml_text(text: str) -> str:
    """``text`` as XML 1.0 can hold it: ANSI colour and cursor codes dropped, every other
    character XML forbids (control characters, lone surrogates) written out as ``\\xNN``."""
    return _XML_ILLEGAL.sub(_escaped, _ANSI.sub("", text))


def _escaped(match: re.Match[str]) -> str:
    code = ord(match[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


class _Case(TestCase):
    file = Attr()  # pytest's own attribute: read_junit maps a case back to its file with it


_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[0-~]")  # CSI sequences, then 2-character ones
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
