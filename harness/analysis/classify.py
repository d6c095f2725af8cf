"""Failure analysis: a category, a signature and the key lines of every failed, flaky or waived
test, from all the evidence (``harness/analysis/rules.py`` holds the table, as data).

Order (the first that applies decides; docs/failure-analysis.md has the table):

1. waived by the waives file -> WAIVED (not a failure);
2. passed on a re-run, alone and again after the tests that ran before it (the executor checks)
   -> FLAKY ("flaky: NCCL timeout once"); or main's ledger records the test as flaky in its recent
   pipelines and it fails here the same way -> FLAKY ("flaky on main: #41, #44"); not blocking;
3. a machine-level rule matched the final exception or how the process ended (another process
   holds the GPU's memory, disk full or quota, ECC / Xid / unavailable / lost GPU, a failed
   download, the runner killed, a limit of the harness or a suite ran out), or one shard-wide
   error hit many unrelated tests of a shard at once (but not the suite's own local service the
   PR changed) -> INFRA ("retry"); an installed package failed to import (causes.py) -> INFRA
   (the environment: one entry, the other tests it failed as its collateral); exit 3 when
   nothing else failed;
4. also failed on the base, in the same stage family, with the same kind of error (the rule
   that names it, else its exception type) -> PRE-EXISTING;
5. passed on the base, failed another way there or than main's flakiness ("fails differently"),
   or did not run there ("new coverage") -> NEW, with its signature (crash / hang / OOM …);
6. not on the base -> UNCLASSIFIED, with its signature.

A file that fails to import is the failure of the tests it hides (NEW when they passed on the base,
naming them). A sticky CUDA error (an illegal memory access poisons the process) is reported once,
with the later tests of its shard that failed the same way as its collateral; the collected tests
that never started (the session ended) are listed with the test it ended during. A test file
whose tests all passed on the base and are all skipped here is "lost coverage" (NEW). A shard
that ended in ERROR without any failed test is one "(whole shard)" entry: NEW when its stage
family passed on the base (the changed files its traceback names are the suspects). An
order-dependent failure's first suspect is the earliest test after which it fails (bisected),
then the tests that ran just before it. Pipeline state and exit code: any NEW / PRE-EXISTING /
UNCLASSIFIED -> FAILURE, 1; only INFRA -> FAILURE, 3; cancelled -> ABORTED, 1; a shard could not run
(NOT_RUN: no GPU of its type here, ``--cpu-slots 0``) -> NOT_RUN, 4, whatever else passed;
otherwise SUCCESS, 0.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from stagebot.harness.analysis.causes import (
    cause_line,
    installed_import_fault,
    is_environment,
    read_tail,
)
from stagebot.harness.analysis.evidence import (
    NEVER_RAN,
    Mismatch,
    error_line,
    failing_frame,
    mismatch,
    never_ran_culprit,
    summary_mismatch,
)
from stagebot.harness.analysis.key_lines import key_lines
from stagebot.harness.analysis.renames import renamed_from
from stagebot.harness.analysis.rules import SHARD_WIDE_TESTS, Rule, Verdict, judge, read_sources
from stagebot.harness.analysis.suspects import (
    MAX_SUSPECTS,
    Suspect,
    import_closure,
    rank_suspects,
    traceback_files,
)
from stagebot.harness.results import SESSION_ID, StageResult, TestOutcome
from stagebot.stages.names import stage_family

ENVIRONMENT_NOTE = (
    "the shard's environment, not the code under test: install the versions that were tested "
    "(the lock), or remove what shadows the module; a re-run as it is fails the same way"
)
CATEGORIES = ("NEW", "PRE-EXISTING", "UNCLASSIFIED", "INFRA", "FLAKY", "WAIVED")
BLOCKING = ("NEW", "PRE-EXISTING", "UNCLASSIFIED")
FAILED = ("failed", "error")
_TIMES = {1: "once", 2: "twice"}
# machine-looking errors that the code under test can cause itself: the PR's when raised
# through a file it changed
CODE_CAUSABLE = ("gpu-unavailable", "download-failed")
# what a runner leaves behind, and what it means
LEFTOVERS = (
    (re.compile(r"\[Errno 98\] Address already in use|EADDRINUSE"), "a port another process holds"),
    (
        re.compile(
            r"PytorchStreamReader failed reading zip archive|MetadataIncompleteBuffer"
            r"|Error while deserializing header|Ran out of input"
        ),
        "a truncated file in the runner's cache",
    ),
)
SLOWER = 10  # a shard that ran out of time with tests this many times slower than on base: NEW
# How much of a crashed shard's log is read: all of a faulthandler dump (up to 100 frames a
# thread, then the extension modules), whose head holds the crash and the innermost frames.
CRASH_TAIL_BYTES = 64_000

_ORDER_SUSPECTS = re.compile(
    r"order-dependent: .*?\((?:to blame: (?P<blame>\S+); )?nearest first: (?P<tests>.*?)\): "
)
_HOST = re.compile(r"host='([^']+)'|\w+://([^/:'\s]+)")
_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
_LOAD = re.compile(r"load average [\d.]+ on \d+ CPUs?")
_EXCEPTION_NAME = re.compile(r"^(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Failure|Exit)?: ")
_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b")
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_NO_MODULE = re.compile(r"ModuleNotFoundError: No module named '(?P<module>[\w.]+)'")
_REQUIREMENTS = re.compile(
    r"(?:^|/)(?:(?:requirements|constraints)[\w.-]*\.txt|pyproject\.toml|setup\.cfg|"
    r"environment\.ya?ml)$"
)
_LOCATED = re.compile(r"^[\w./\\-]+\.py:\d+: (?P<error>[\w.]+)")
_BASE_DURATION = re.compile(r" in [\d.]+ s$")  # "passed on base #3 in 0.02 s"
BaseOutcomes = Mapping[tuple[str, str], TestOutcome]  # (stage family, test id) -> outcome


@dataclass(frozen=True)
class Failure:
    stage: str
    test_id: str
    category: str
    evidence: str
    attempts: int = 1
    mismatch: Mismatch | None = None
    suspects: tuple[Suspect, ...] = ()
    note: str | None = None  # e.g. "also failing on base #12"
    log: str | None = None
    signature: str | None = None  # "crash: SIGSEGV in rank 1", "flaky: NCCL timeout once"
    collateral: tuple[str, ...] = ()  # later tests the same sticky error failed
    never_ran: tuple[str, ...] = ()  # collected tests that never started: the session ended
    key_lines: tuple[str, ...] = ()
    log_link: str | None = None  # the full log: the stage job's URL, or the local file


@dataclass(frozen=True)
class Analysis:
    failures: list[Failure]
    state: str  # SUCCESS | FAILURE | ABORTED | NOT_RUN
    exit_code: int
    base_pipeline: int | None
    not_run: list[tuple[str, str]] = field(default_factory=list)  # (stage, why)

    def of(self, category: str) -> list[Failure]:
        return [failure for failure in self.failures if failure.category == category]

    def counts(self) -> dict[str, int]:
        return {category: len(self.of(category)) for category in CATEGORIES}

    def groups(self, category: str) -> list[tuple[Failure, list[Failure]]]:
        """The category's failures, identical ones (same evidence and signature, across shards
        and ranks) folded into their first: [(first, the others)]."""
        grouped: dict[tuple, tuple[Failure, list[Failure]]] = {}
        for failure in self.of(category):
            note = _BASE_DURATION.sub("", failure.note or "")  # each passed in its own time
            key = (failure.evidence, failure.signature, note)
            if key in grouped:
                grouped[key][1].append(failure)
            else:
                grouped[key] = (failure, [])
        return list(grouped.values())


@dataclass(frozen=True)
class _Context:
    """What every failure of one analysis is compared with."""

    base: BaseOutcomes | None
    base_commit: str | None  # where a renamed test's old body is read
    base_logs: Mapping[tuple[str, str], str]
    base_pipeline: int | None
    flaky_history: Mapping[tuple[str, str], tuple[int, ...]]
    flaky_evidence: Mapping[tuple[str, str], tuple[str, ...]]  # how it failed there
    changed_files: list[str] | None
    stage_paths: Mapping[str, list[str]]
    root: Path | None


@dataclass(frozen=True)
class _Case:
    result: StageResult
    test: TestOutcome
    log: str | None
    verdict: Verdict
    environment_fault: str | None = None  # causes.installed_import_fault


def is_infra(evidence: str | None, log: str | None = None) -> bool:
    """Whether the evidence holds a machine-level signature (never a test's own assertion)."""
    return judge(read_sources(evidence, log)).machine is not None


def nothing_ran(results: list[StageResult]) -> bool:
    """No shard ran here, and some could not (this host lacks their GPUs, ``--cpu-slots 0``):
    not a pass, whatever was reused."""
    return any(r.state == "NOT_RUN" for r in results) and all(
        r.state in ("NOT_RUN", "REUSED") for r in results
    )


def analyse(
    results: list[StageResult],
    *,
    base: BaseOutcomes | None = None,
    base_pipeline: int | None = None,
    changed_files: list[str] | None = None,
    stage_paths: Mapping[str, list[str]] | None = None,
    logs: Mapping[tuple[str, str], str] | None = None,
    cancelled: bool = False,
    flaky_history: Mapping[tuple[str, str], tuple[int, ...]] | None = None,
    flaky_evidence: Mapping[tuple[str, str], tuple[str, ...]] | None = None,
    root: Path | None = None,
    log_links: Mapping[str, str] | None = None,
    base_logs: Mapping[tuple[str, str], str] | None = None,
    base_commit: str | None = None,
) -> Analysis:
    """Classify every failed / flaky / waived test of ``results`` (see the module's docstring).
    ``flaky_evidence``: (family, test id) -> the evidence of its failures where main saw it flaky
    (a failure unlike all of them is not main's flakiness). ``base_logs``: (family, test id) ->
    the base's failure text (where its failing frame is read)."""
    logs = logs or {}
    context = _Context(
        base,
        base_commit,
        base_logs or {},
        base_pipeline,
        flaky_history or {},
        flaky_evidence or {},
        changed_files,
        stage_paths or {},
        root,
    )
    failures: list[Failure] = []
    for result in results:
        cases = [
            _case(result, test, logs.get((result.stage, test.test_id)))
            for test in result.tests
            if test.outcome in (*FAILED, "flaky", "waived")
        ]
        collateral, never = _collateral(cases), _never_ran(cases)
        folded = {test_id for later in [*collateral.values(), *never.values()] for test_id in later}
        wide = _shard_wide(cases)
        link = (log_links or {}).get(result.stage) or result.log_path
        for case in cases:
            test_id = case.test.test_id
            if test_id not in folded:
                failure = _failure(case, context, wide, link)
                later = tuple(collateral.get(test_id, ()))
                failures.append(
                    replace(failure, collateral=later, never_ran=tuple(never.get(test_id, ())))
                )
        if result.state == "ERROR" and not any(c.test.outcome in FAILED for c in cases):
            failures.append(_whole_shard(result, link, context))
        failures += _lost_coverage(result, link, context)
    order = {category: index for index, category in enumerate(CATEGORIES)}
    failures.sort(key=lambda f: (order[f.category], f.stage, f.test_id))
    categories = {failure.category for failure in failures}
    if cancelled:
        state, code = "ABORTED", 1
    elif categories & set(BLOCKING):
        state, code = "FAILURE", 1
    elif "INFRA" in categories:
        state, code = "FAILURE", 3
    elif any(r.state == "NOT_RUN" for r in results):  # untested is never a pass
        state, code = "NOT_RUN", 4
    else:
        state, code = "SUCCESS", 0
    not_run = [(r.stage, r.evidence or "not run") for r in results if r.state == "NOT_RUN"]
    return Analysis(failures, state, code, base_pipeline, not_run)


def _failure(case: _Case, context: _Context, wide: set[str], link: str | None) -> Failure:
    """One case's classified failure with its key lines, log link and (when NEW) suspects."""
    result, test = case.result, case.test
    failure = _classify(case, context, wide)
    tail = _shard_log_tail(result) if not case.log else None
    lines = [] if test.outcome == "waived" else key_lines(failure.evidence, case.log, tail)
    failure = replace(failure, key_lines=tuple(lines), log_link=link)
    if failure.category != "NEW":
        return failure
    suspects = rank_suspects(
        test.test_id,
        case.log or tail,
        context.changed_files,
        root=context.root,
        stage_patterns=tuple(context.stage_paths.get(result.stage, ())),
    )
    ranked = (*_earlier_tests(failure.evidence), *failure.suspects, *suspects)
    first = {}  # path -> its first (strongest) reason
    for suspect in ranked:
        first.setdefault(suspect.path, suspect)
    return replace(failure, suspects=tuple(first.values())[:MAX_SUSPECTS])


def _case(result: StageResult, test: TestOutcome, log: str | None) -> _Case:
    fault = None
    if test.outcome in FAILED:
        fault = installed_import_fault(f"{test.evidence}\n{log or ''}", result.environment)
    return _Case(result, test, log, judge(read_sources(test.evidence, log)), fault)


def _collateral(cases: list[_Case]) -> dict[str, list[str]]:
    """The first failure of each sticky error, or of each installed package's import fault ->
    the later failures of the shard with it."""
    collateral: dict[str, list[str]] = {}
    first: dict[str, str] = {}  # signature -> the test that hit it first
    for case in cases:
        if case.test.outcome not in FAILED:
            continue
        if case.environment_fault:
            signature = case.environment_fault
        elif case.verdict.sticky:
            signature = case.verdict.signature or ""
        else:
            continue
        if signature in first:
            collateral.setdefault(first[signature], []).append(case.test.test_id)
        else:
            first[signature] = case.test.test_id
    return collateral


def _never_ran(cases: list[_Case]) -> dict[str, list[str]]:
    """The test during which pytest ended -> the collected tests that never started after it
    (one entry: the tests it took with it); without such a test, the first of them carries the
    others."""
    ids = {case.test.test_id for case in cases}
    never: dict[str, list[str]] = {}
    orphans: list[str] = []  # no failed test ended the session
    for case in cases:
        evidence = case.test.evidence or ""
        if case.test.outcome in FAILED and evidence.startswith(NEVER_RAN):
            culprit = never_ran_culprit(evidence)
            if culprit in ids:
                never.setdefault(culprit, []).append(case.test.test_id)
            else:
                orphans.append(case.test.test_id)
    if orphans:
        never.setdefault(orphans[0], []).extend(orphans[1:])
    return never


def _shard_wide(cases: list[_Case]) -> set[str]:
    """Shard-wide signatures that hit at least SHARD_WIDE_TESTS tests in two files or more."""
    files: dict[str, list[str]] = {}
    for case in cases:
        if case.test.outcome in FAILED and case.verdict.shard_wide:
            files.setdefault(case.verdict.shard_wide, []).append(case.test.test_id.split("::")[0])
    return {
        signature
        for signature, paths in files.items()
        if len(paths) >= SHARD_WIDE_TESTS and len(set(paths)) >= 2
    }


def _classify(case: _Case, context: _Context, wide: set[str]) -> Failure:
    result, test, verdict = case.result, case.test, case.verdict
    base, base_pipeline = context.base, context.base_pipeline
    evidence = test.evidence or f"{test.outcome} (no error text was captured)"
    common = {
        "attempts": test.attempts,
        "mismatch": mismatch(case.log),
        "log": case.log,
    }
    first = evidence.split("after: ", 1)[-1] if test.outcome == "flaky" else evidence
    frame = failing_frame(case.log)
    signature = (
        verdict.machine_signature
        or verdict.signature
        or verdict.shard_wide
        or _fallback(first, case.log) + (f" in {frame}" if frame else "")
    )
    if test.test_id == SESSION_ID:
        signature = "suite verdict: pytest exited 1 with no failed test"
    elif "::" not in test.test_id and test.outcome in FAILED:
        signature = f"collection error: {signature}"

    def failure(category: str, note: str | None = None, sig: str | None = signature) -> Failure:
        return Failure(
            result.stage, test.test_id, category, evidence, note=note, signature=sig, **common
        )

    if test.outcome == "waived":
        return failure("WAIVED", sig=None)
    if test.outcome == "flaky":
        failed = max(test.attempts - 1, 1)
        return failure("FLAKY", sig=f"flaky: {signature} {_TIMES.get(failed, f'{failed} times')}")
    family = stage_family(result.stage)
    history = context.flaky_history.get((family, test.test_id))
    if history:
        numbers = ", ".join(f"#{n}" for n in history)
        seen = context.flaky_evidence.get((family, test.test_id), ())
        if seen and error_kind(evidence) not in {error_kind(e) for e in seen}:
            there = f"flaky there {numbers}: {signature_of(seen[-1])}"
            return failure("NEW", f"fails differently than on main ({there})")
        return failure("FLAKY", note="flaky on main: " + numbers)
    slower = _slower_than_base(case, context)
    if slower is not None:
        return failure("NEW", slower[1], sig=slower[0])
    own = _raised_through_the_pr(case, context)
    if own:
        note = f"{verdict.machine.means}, but raised through the PR's own code: the PR's doing"
        return replace(failure("NEW", note), suspects=own)
    if verdict.machine is not None:
        return failure("INFRA", note=_infra_note(verdict.machine, evidence, case.log))
    if case.environment_fault:
        return failure("INFRA", note=ENVIRONMENT_NOTE, sig=case.environment_fault)
    if verdict.shard_wide in wide and not _own_service(case, context):
        return failure("INFRA", note="the same error hit many unrelated tests of this shard: retry")
    leftover = _runner_leftover(case, context)
    if leftover is not None:
        return failure("INFRA", note=leftover)
    package = _missing_package(case, context)
    if package is not None:
        category, note, suspects = package
        return replace(failure(category, note), suspects=suspects)
    if base is None:
        return failure("UNCLASSIFIED", "no base pipeline to compare with")
    if "::" not in test.test_id:
        return _file_level(failure, base, base_pipeline, family, test.test_id)
    before = base.get((family, test.test_id))
    renamed = _renamed_from(case, context) if before is None else None
    if renamed is not None:
        before = base[(family, renamed)]
        # what follows is said of the old name's result
        base_pipeline = f"{base_pipeline} as {renamed.split('::')[-1]} (renamed, same body)"
    if before is None:
        return failure("UNCLASSIFIED", f"base #{base_pipeline} did not run this test in {family}")
    if before.outcome in FAILED:
        if before.evidence and error_kind(before.evidence) != error_kind(evidence):
            there = signature_of(before.evidence)
            return failure("NEW", f"fails differently than on base #{base_pipeline}: there {there}")
        there = failing_frame(context.base_logs.get((family, renamed or test.test_id)))
        here = failing_frame(case.log)
        if there and here and there != here:
            return failure(
                "NEW", f"fails elsewhere than on base #{base_pipeline}: in {here}, there in {there}"
            )
        worse = worse_than(before.evidence, evidence)
        if worse:
            return failure("NEW", f"worse than on base #{base_pipeline}: {worse}")
        return failure("PRE-EXISTING", f"also failing on base #{base_pipeline}")
    if before.outcome in ("passed", "flaky"):
        return failure("NEW", f"passed on base #{base_pipeline} in {_seconds(before.duration_s)}")
    if before.outcome in ("skipped", "waived"):
        return failure(
            "NEW", f"new coverage: did not run on base #{base_pipeline} ({before.outcome} there)"
        )
    return failure("NEW", f"{before.outcome} on base #{base_pipeline}")


def _renamed_from(case: _Case, context: _Context) -> str | None:
    """The id the base ran this test under, when the PR only renamed it (renames.py)."""
    if context.root is None or not context.base_commit or not context.base:
        return None
    family = stage_family(case.result.stage)
    path = case.test.test_id.split("::")[0]
    here = {t.test_id for t in case.result.tests}
    gone = [
        test_id
        for fam, test_id in context.base
        if fam == family and test_id.startswith(path + "::") and test_id not in here
    ]
    if not gone:
        return None
    return renamed_from(case.test.test_id, context.root, context.base_commit, gone)


def _file_level(failure, base, base_pipeline, family: str, test_id: str) -> Failure:
    """A collection error (the id is a file) or the suite's session verdict, against the base."""
    same = base.get((family, test_id))
    if same is not None and same.outcome in FAILED:
        return failure("PRE-EXISTING", f"also failing on base #{base_pipeline}")
    if test_id == SESSION_ID:
        ran = any(key[0] == family for key in base)
        if ran:
            return failure("NEW", f"the session passed on base #{base_pipeline}")
        return failure("UNCLASSIFIED", f"base #{base_pipeline} did not run {family}")
    hidden = sorted(
        (key[1], outcome)
        for key, outcome in base.items()
        if key[0] == family and key[1].startswith(test_id + "::")
    )
    passed = [test for test, outcome in hidden if outcome.outcome in ("passed", "flaky")]
    if passed:
        shown = ", ".join(t.split("::", 1)[1] for t in passed[:5]) + (
            " …" if len(passed) > 5 else ""
        )
        return failure(
            "NEW", f"hides {len(passed)} test(s) that passed on base #{base_pipeline}: {shown}"
        )
    if hidden:
        return failure("PRE-EXISTING", f"its tests also failed on base #{base_pipeline}")
    return failure("UNCLASSIFIED", f"base #{base_pipeline} did not run this file in {family}")


def _lost_coverage(result: StageResult, link: str | None, context: _Context) -> list[Failure]:
    """A test file whose tests all passed on the base and are all skipped here (a skip mark the
    PR added): one NEW finding per file, naming the tests it lost. Waived tests are not skipped
    (the waives file says so), and a file skipped on the base too lost nothing."""
    if not context.base:
        return []
    family = stage_family(result.stage)
    files: dict[str, list[TestOutcome]] = {}
    for test in result.tests:
        if "::" in test.test_id:
            files.setdefault(test.test_id.split("::")[0], []).append(test)
    found = []
    for path, tests in files.items():
        before = [context.base.get((family, t.test_id)) for t in tests]
        if any(t.outcome != "skipped" for t in tests) or not all(
            b is not None and b.outcome in ("passed", "flaky") for b in before
        ):
            continue
        names = [t.test_id.split("::", 1)[1] for t in tests]
        shown = ", ".join(names[:5]) + (f" … ({len(names)} in all)" if len(names) > 5 else "")
        reasons = sorted({t.evidence or "no reason given" for t in tests})
        test_id = f"{path} (lost coverage)"
        found.append(
            Failure(
                result.stage,
                test_id,
                "NEW",
                f"skipped here: {'; '.join(reasons)[:200]}",
                signature=f"lost coverage: {len(tests)} test(s) skipped here, passed on base",
                note=f"passed on base #{context.base_pipeline}, skipped here: {shown}",
                suspects=rank_suspects(
                    path,
                    None,
                    context.changed_files,
                    root=context.root,
                    stage_patterns=tuple(context.stage_paths.get(result.stage, ())),
                ),
                log_link=link,
            )
        )
    return found


def _whole_shard(result: StageResult, link: str | None, context: _Context) -> Failure:
    """A shard that ended in ERROR with no failed test (pytest died starting up, a conftest that
    fails to import, a crash before the first test): judged by its cause, then against the base
    by stage family, with the changed files its traceback names as suspects."""
    evidence = result.evidence or "the shard ended in ERROR without evidence"
    test_id = f"{result.stage} (whole shard)"
    verdict = judge(read_sources(evidence, None))
    signature = verdict.machine_signature or verdict.signature or _fallback(evidence, None)
    tail = _shard_log_tail(result)
    category, note, suspects = "UNCLASSIFIED", "no test failed", ()
    family = stage_family(result.stage)
    passed = [
        key for key, outcome in (context.base or {}).items()
        if key[0] == family and outcome.outcome in ("passed", "flaky")
    ]  # fmt: skip
    if verdict.machine is not None:
        category, note = "INFRA", _infra_note(verdict.machine, evidence, None)
    elif is_environment(evidence):  # the shard's Python cannot run it: a retry fails the same way
        category, signature, note = "INFRA", "environment", "fix the shard's environment"
    elif passed:
        category = "NEW"
        ran = sum(t.outcome in ("passed", "flaky", "xfailed") for t in result.tests)
        here = f"{ran} test(s) passed here, yet" if ran else "no test ran here;"
        note = f"{here} {len(passed)} test(s) of {family} passed on base #{context.base_pipeline}"
        suspects = rank_suspects(
            test_id,
            f"{evidence}\n{tail or ''}",
            context.changed_files,
            root=context.root,
            stage_patterns=tuple(context.stage_paths.get(result.stage, ())),
        )
    elif context.base is None:
        note = "no test failed; no base pipeline to compare with"
    return Failure(
        result.stage,
        test_id,
        category,
        cause_line(evidence),
        signature=signature,
        note=note,
        suspects=suspects,
        key_lines=tuple(key_lines(evidence, None, tail)),
        log_link=link,
    )


def error_kind(evidence: str | None) -> str:
    """What kind of error an evidence line is, comparable across pipelines: the rule that names
    it, else its exception type and its message with the numbers and addresses masked (another
    assertion with another message is another failure; other numbers in it are not)."""
    verdict = judge(read_sources(evidence, None))
    if verdict.machine is not None:
        return verdict.machine.name
    if verdict.kind:
        return verdict.kind
    line = evidence or ""
    message = line.split(": ", 1)[1] if _EXCEPTION_NAME.match(line) else line
    return f"{_fallback(line, None)}: {_masked(message)}"


def worse_than(there: str | None, here: str) -> str | None:
    """How much worse a numeric failure is here than on the base (at least twice the
    mismatched elements or the largest difference), both figures; None when it is not."""
    base, now = summary_mismatch(there), summary_mismatch(here)
    if base is None or now is None:
        return None
    worse = []
    if now.mismatched >= max(2 * base.mismatched, base.mismatched + 2):
        worse.append(f"{now.mismatched}/{now.total} mismatched ({base.mismatched} there)")
    if base.max_abs is not None and now.max_abs is not None and now.max_abs >= 2 * base.max_abs:
        worse.append(f"max abs diff {now.max_abs:g} ({base.max_abs:g} there)")
    return ", ".join(worse) or None


def _masked(message: str) -> str:
    """``message`` with its addresses and numbers masked."""
    return _NUMBER.sub("N", _HEX.sub("<address>", message.strip()))


def signature_of(evidence: str | None) -> str:
    """The signature of an evidence line alone (another pipeline's failure: no log here)."""
    verdict = judge(read_sources(evidence, None))
    return verdict.machine_signature or verdict.signature or _fallback(evidence or "", None)


def _slower_than_base(case: _Case, context: _Context) -> tuple[str, str] | None:
    """(signature, note) when the shard ran out of time because its code got slower: the
    tests that finished took at least SLOWER times as long as on the base (and a second in
    all). None when they took about as long: the machine's limit, INFRA."""
    if case.verdict.machine is None or case.verdict.machine.name != "shard-timeout":
        return None
    family = stage_family(case.result.stage)
    here = there = 0.0
    count = 0
    for test in case.result.tests:
        before = (context.base or {}).get((family, test.test_id))
        if test.outcome == "passed" and before is not None and before.outcome == "passed":
            here, there, count = here + test.duration_s, there + before.duration_s, count + 1
    if not count or here < 1.0 or here < SLOWER * max(there, 0.001):
        return None
    times = here / max(there, 0.001)
    return f"slow: {times:.0f}× slower than on base", (
        f"{times:.0f}× slower than on base #{context.base_pipeline}: the {count} test(s) that "
        f"finished took {_seconds(here)} here, {_seconds(there)} there"
    )


def _raised_through_the_pr(case: _Case, context: _Context) -> tuple[Suspect, ...]:
    """The PR's changed files in the traceback of a machine-looking error that code can cause
    (no GPU visible, a download failed): the PR's launcher hid the GPUs, the PR's test added
    the download. Empty for the machine's own (nothing the PR changed on the way)."""
    machine = case.verdict.machine
    if machine is None or machine.name not in CODE_CAUSABLE or not context.changed_files:
        return ()
    frames = traceback_files(case.log or "", context.root)
    return tuple(
        Suspect(path, "in traceback")
        for path in context.changed_files
        if any(frame == path or frame.endswith("/" + path) for frame in frames)
    )


def _runner_leftover(case: _Case, context: _Context) -> str | None:
    """What a runner left behind made the test fail (a port another process holds, a truncated
    file in its model cache), when neither the test nor anything it imports changed: INFRA.
    Through code the PR changed, the same error is judged against the base."""
    final = read_sources(case.test.evidence, case.log)["final"]
    means = next((m for pattern, m in LEFTOVERS if pattern.search(final)), None)
    if means is None or context.root is None or context.changed_files is None:
        return None
    test_file = case.test.test_id.split("::")[0]
    touched = import_closure(str(context.root.resolve()), test_file) | {test_file}
    touched |= set(traceback_files(case.log or "", context.root))
    if any(path in touched for path in context.changed_files):
        return None
    return f"{means}, and the test and all it imports are unchanged: clean the runner, then retry"


def _missing_package(case: _Case, context: _Context):
    """(category, note, suspects) of a test that cannot import a package (not the repository's
    own): NEW when a requirements file the PR changed no longer lists it (that file the first
    suspect); INFRA when the PR changed nothing the test imports (the runner's image lost it);
    else None (judged as any other failure)."""
    found = _NO_MODULE.search(case.test.evidence or "")
    root, changed = context.root, context.changed_files or []
    if found is None or root is None:
        return None
    top = found["module"].split(".")[0]
    if any((root / where / top).exists() or (root / where / f"{top}.py").exists()
           for where in (".", "src")):  # fmt: skip
        return None  # the repository's own module: the import rule and the base decide
    wanted = top.lower().replace("-", "_")
    for path in (p for p in changed if _REQUIREMENTS.search(p)):
        try:
            text = (root / path).read_text(encoding="utf-8").lower().replace("-", "_")
        except OSError:
            continue
        if not re.search(rf"\b{re.escape(wanted)}\b", text):
            return (
                "NEW",
                f"the PR's {path} no longer lists {top!r}",
                (Suspect(path, f"no longer lists {top!r}"),),
            )
    test_file = case.test.test_id.split("::")[0]
    closure = import_closure(str(root.resolve()), test_file)
    if not any(path in closure or path == test_file for path in changed):
        note = f"the runner's environment lacks {top!r} and the PR changed nothing the test "
        return "INFRA", note + "imports: fix the image, then retry", ()
    return None


def _own_service(case: _Case, context: _Context) -> bool:
    """A refused connection that is the suite's own service, not the machine's: to no named
    host but this one (127.0.0.1, localhost), failing on every attempt, in a test that passed on
    the base and imports a changed file (the PR changed the service or its client)."""
    test = case.test
    before = (context.base or {}).get((stage_family(case.result.stage), test.test_id))
    if before is None or before.outcome not in ("passed", "flaky"):
        return False
    final = read_sources(test.evidence, case.log)["final"]
    hosts = {a or b for a, b in _HOST.findall(final)}
    if hosts - _LOCAL_HOSTS or context.root is None or not context.changed_files:
        return False
    closure = import_closure(str(context.root.resolve()), test.test_id.split("::")[0])
    return any(path in closure for path in context.changed_files)


def _infra_note(rule: Rule, evidence: str, log: str | None) -> str:
    """What a machine-level failure means, with the host's load when a limit ran out (the
    executor's timeout line or the test log's ``stagebot: load`` section records it)."""
    found = _LOAD.search(f"{evidence}\n{log or ''}") if rule.limit else None
    return f"{rule.means} ({found[0]}): retry" if found else f"{rule.means}: retry"


def _earlier_tests(evidence: str) -> tuple[Suspect, ...]:
    """An order-dependent failure's suspects: the tests that ran just before it (the executor's
    ``order-dependent: …`` line names them, nearest first)."""
    found = _ORDER_SUSPECTS.match(evidence)
    if found is None:
        return ()
    blame = found["blame"]
    first = (Suspect(blame, "the first earlier test after which it fails"),) if blame else ()
    nearest = [t for t in found["tests"].split(", ") if t != blame]
    return (*first, *(Suspect(t, "ran before it in its process") for t in nearest))


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value < 10 else f"{value:.0f} s"


def _fallback(evidence: str, log: str | None) -> str:
    """A signature for a failure no rule names: the kind of error and its first words."""
    line = error_line(log) or evidence
    located = _LOCATED.match(line)  # "path.py:12: ValueError": the error, not the file
    kind = located["error"] if located else line.split(":", 1)[0] if ":" in line else line
    if kind.startswith("assert") or kind.endswith("AssertionError"):
        return "assertion"
    return PurePosixPath(kind.split(".")[-1]).name[:60] or "error"


def _shard_log_tail(result: StageResult, size: int = CRASH_TAIL_BYTES) -> str | None:
    return (read_tail(Path(result.log_path), size) or None) if result.log_path else None
