"""JUnit XML: read pytest's files safely (defusedxml) and write a shard's merged file.

Reading is tolerant in one way only: a missing file is reported as such; a truncated or corrupt
one raises ``JunitError`` naming the file and the parser's complaint, so the executor can mark
the shard ERROR with that evidence instead of trusting half a file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

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
    counts = {k: sum(t.outcome in v for t in tests) for k, v in _COUNTS.items()}
    suite = ElementTree.Element(
        "testsuite",
        name=suite_name,
        tests=str(len(tests)),
        time=f"{sum(t.duration_s for t in tests):.3f}",
        **{k: str(v) for k, v in counts.items()},
    )
    for test in tests:
        file, _, name = test.test_id.partition("::")
        case = ElementTree.SubElement(
            suite,
            "testcase",
            classname=file.removesuffix(".py").replace("/", "."),
            name=name or file,
            file=file,
            time=f"{test.duration_s:.3f}",
        )
        if test.outcome in ("failed", "error"):
            tag = "failure" if test.outcome == "failed" else "error"
            ElementTree.SubElement(case, tag, message=test.evidence or test.outcome)
        elif test.outcome in ("skipped", "waived"):
            ElementTree.SubElement(case, "skipped", message=test.evidence or test.outcome)
        elif test.outcome == "xfailed":
            reason = test.evidence or test.outcome
            ElementTree.SubElement(case, "skipped", type=XFAIL_TYPE, message=reason)
        elif test.outcome == "flaky":
            properties = ElementTree.SubElement(case, "properties")
            ElementTree.SubElement(properties, "property", name="flaky", value=str(test.attempts))
    tree = ElementTree.ElementTree(suite)
    ElementTree.indent(tree)
    tree.write(path, encoding="utf-8", xml_declaration=True)


_COUNTS = {
    "failures": ("failed",),
    "errors": ("error",),
    "skipped": ("skipped", "waived", "xfailed"),
}
