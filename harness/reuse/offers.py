"""Reuse by dependency key: which of a shard's tests need not run, and the keys of those that ran.

Three steps, each where what it needs is (docs/reuse.md, "How it is wired"):

- **offer** (the trusted side, with the ledger: the local executor, `bot handle-event`'s plan):
  ``offer(entries, catalog, book, ...)`` gives each test shard's matrix entry its family's key
  inputs and, unless reuse is off, the newest passed run of each of the family's tests that the
  ledger's trust rule admits (``Ledger.trusted_passes``: main's post-merge pipelines and the same
  PR's earlier ones): its code key, environment and gpu digests, and source pipeline;
- **check** (the runner, ``run_shard``, before pytest starts): ``KeyCheck.before`` computes each
  offered test's key on this checkout; a test whose code parts (test, files, suite_args,
  catalog) match, and whose environment and gpu parts match this runner's, is reused: deselected
  from the shard's pytest run. ``KeyCheck.after`` writes ``keys.json`` beside the result: the
  reused tests and the keys of the tests that reached an outcome (none for a test a crash cut
  off: it has no outcome);
- **record** (the trusted side again): ``read_keys`` takes ``keys.json`` back; a reuse it claims
  is kept only when the ledger's own lookup offers that test from that source (the file comes
  from a runner, which runs PR code).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from stagebot.harness.ledger.keys import RecordedKey
from stagebot.harness.results import StageResult, TestOutcome
from stagebot.harness.reuse.dependency_key import (
    DependencyKey,
    Environment,
    FamilyInputs,
    Observation,
    Repository,
    changed_lines,
    current_environment,
    dependency_key,
)
from stagebot.harness.reuse.observe import FOLDER as OBSERVED
from stagebot.harness.reuse.observe import read_observations
from stagebot.harness.reuse.sampled import sample
from stagebot.stages.history import EnvironmentChange
from stagebot.stages.names import stage_family
from stagebot.stages.plan import MatrixEntry

KEYS_FILE = "keys.json"
REFUSED = (
    "not run: the stage job skipped it as reused by key, but the ledger does not offer that "
    "pipeline's pass to this one; run it again"
)
FILE_DIGEST_CHARS = 16  # of each file's sha256 kept in the ledger (for `--explain-reuse`)
DIGEST_CHARS = 16  # of a key and part digests a matrix entry carries (64 bits: equality only)
Passed = dict[str, tuple[int, float]]  # test id -> (source pipeline, its duration)


def offer(
    entries: list[MatrixEntry],
    catalog,
    book,
    pipeline: int,
    *,
    default_branch: str,
    enabled: bool = True,
    main_book=None,
    audit_rate: float = 0.0,
) -> list[MatrixEntry]:
    """``entries`` of pipeline ``pipeline`` with their ``key_reuse`` filled: every test shard
    gets its family's key inputs (so its keys are recorded), and the trusted passed runs of its
    family's tests when ``enabled`` and there is a ledger (``book``, which has the pipeline; in
    Actions a PR's own, with ``main_book``, main's vouched ledger, beside it). ``audit_rate``
    (main's post-merge pipelines): the share of the tests a shard would reuse by key that it
    runs anyway, seeded by the pipeline's number (``KeyCheck.before``)."""
    out, offers = [], {}
    for entry in entries:
        stage = catalog.stage(entry.stage)
        if entry.command is not None or stage is None:
            out.append(entry)
            continue
        family = stage.family
        if family.name not in offers:
            found = (
                trusted(book, pipeline, family.name, default_branch, main_book)
                if enabled and book is not None
                else {}
            )
            offers[family.name] = _compact(found)
        inputs = FamilyInputs.of(family, catalog.waives)
        reuse = {"family": inputs.to_json(), **offers[family.name]}
        if audit_rate > 0 and reuse.get("candidates"):
            reuse["audit"] = [audit_rate, pipeline]
        out.append(replace(entry, key_reuse=reuse))
    return out


def _compact(found: dict) -> dict[str, Any]:
    """The offered passes as a matrix entry carries them (its JSON travels in a dispatch's
    inputs, at most 60,000 characters): each distinct (source, environment, gpu) once in
    ``sources``; per test, its code key's first ``DIGEST_CHARS``, its source's index and, when
    its run observed files its static reading left out, those files (its key digests them)."""
    sources: list[list] = []
    index: dict[tuple, int] = {}
    candidates = {}
    for test, hit in sorted(found.items()):
        where = (
            hit.pipeline,
            hit.parts.get("environment", "")[:DIGEST_CHARS],
            hit.parts.get("gpu", "")[:DIGEST_CHARS],
        )
        if where not in index:
            index[where] = len(sources)
            sources.append(list(where))
        observed = json.loads(hit.parts.get("observed", "[]"))
        candidates[test] = [hit.key[:DIGEST_CHARS], index[where], *([observed] if observed else [])]
    return {"sources": sources, "candidates": candidates}


def without_offers(entries: list[MatrixEntry]) -> list[MatrixEntry]:
    """``entries`` offering nothing (their keys are still recorded): for a matrix too long
    for a dispatch with the offers in it."""
    return [
        replace(e, key_reuse={**e.key_reuse, "sources": [], "candidates": {}}) if e.key_reuse else e
        for e in entries
    ]


def gpu_driver(gpu_count: int) -> str:
    """The NVIDIA driver version for a GPU shard ("none" for a CPU one or without a driver)."""
    smi = shutil.which("nvidia-smi")
    if gpu_count == 0 or smi is None:
        return "none"
    try:
        done = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=60,  # only stops a hang
            check=True,
        )
    except (subprocess.SubprocessError, OSError):
        return "none"
    return (done.stdout.splitlines() or ["none"])[0].strip()


def runner_environment(gpu_type: str, gpu_count: int) -> Environment:
    """The environment this process gives a shard of ``gpu_type`` (with this driver)."""
    return current_environment(gpu_type, gpu_driver(gpu_count))


def environment_change_here() -> EnvironmentChange:
    """A plan's check of a same-commit reuse on the machine that runs the shards (`bot run`,
    `bot dry-run`): what differs between the environment a shard ran in (its result's
    ``environment``) and the one a shard of that GPU type gets here now, None when nothing
    does. This machine is read once per GPU type and count, however many shards ask."""
    here: dict[tuple[str, int], list[str]] = {}

    def change(gpu_type: str, gpu_count: int, then: Sequence[str] | None) -> str | None:
        if then is None:
            return "its result does not say where it ran (recorded by an older stagebot)"
        if (gpu_type, gpu_count) not in here:
            here[gpu_type, gpu_count] = runner_environment(gpu_type, gpu_count).lines()
        return changed_lines(then, here[gpu_type, gpu_count])

    return change


@dataclass
class KeyCheck:
    """One shard's reuse by key on the runner: what it reused, and the keys it records."""

    family: FamilyInputs
    environment: Environment
    repo: Repository
    reused: Passed = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    audited: Passed = field(default_factory=dict)  # would be reused; run anyway (the audit)
    audit: tuple[float, int] | None = None  # the audit's (rate, seed), from the entry
    # reads the static inputs of the shard's test files while its tests run (read_ahead)
    _reader: threading.Thread | None = field(default=None, repr=False, compare=False)
    _stop_reading: threading.Event = field(
        default_factory=threading.Event, repr=False, compare=False
    )

    @classmethod
    def before(cls, entry: MatrixEntry, root: Path) -> KeyCheck | None:
        """The check of ``entry`` on the checkout at ``root`` (None: no key for this shard)."""
        if not entry.key_reuse or entry.command is not None:
            return None
        family = FamilyInputs.from_json(entry.key_reuse["family"], entry.waives)
        check = cls(family, runner_environment(entry.gpu_type, entry.gpu_count), Repository(root))
        share = set(entry.tests) if entry.tests else None
        dropped: Counter[str] = Counter()
        sources = entry.key_reuse.get("sources", [])
        for test_id, (code, at, *seen) in sorted(entry.key_reuse.get("candidates", {}).items()):
            source, environment, gpu = sources[at]
            if (share is not None and test_id not in share) or test_id in entry.reused_tests:
                continue
            key = check.key(test_id, Observation(tuple(seen[0]) if seen else ()))
            if key.code[:DIGEST_CHARS] != code:
                continue
            mismatch = [
                part
                for part, recorded in (("environment", environment), ("gpu", gpu))
                if key.parts[part][:DIGEST_CHARS] != recorded
            ]
            if mismatch:
                dropped[" and ".join(mismatch)] += 1
                continue
            check.reused[test_id] = (source, 0.0)  # the ledger's duration is recorded
        if entry.key_reuse.get("audit"):
            rate, seed = entry.key_reuse["audit"]
            check.audit = (float(rate), int(seed))
            for test_id in sample(list(check.reused), *check.audit):
                check.audited[test_id] = check.reused.pop(test_id)
        check.notes = [
            f"{n} test(s) with unchanged code not reused: their {what} differ(s) on this runner"
            for what, n in sorted(dropped.items())
        ]
        return check

    def read_ahead(self, entry: MatrixEntry) -> None:
        """Reads the static inputs of the shard's test files (``Repository.inputs``: their
        import closures, each module parsed once) on a thread, while its tests run: after the
        run, its keys then only add what the run observed. The static reading is most of the
        keys' time (a DGX_H200-PyTorch shard's 377 tests: 70 modules parsed), and it reads only
        the checkout, which the run leaves as it found it; the Repository it fills is the one
        ``before`` made (its file list, then). The test files are those of the shard's share
        (``entry.tests``), else those under its suites' paths that pytest collects by default.
        Nothing else reads ``repo`` until the thread is joined (``key``), which first stops it
        after the file it is reading (a shard cut short reads only its finished tests' files,
        as before); a failure on it is left for ``key`` to meet again, on the caller's thread."""
        if self._reader is not None:
            return
        files = _test_files(entry, self.repo.files)
        plugins = self.family.plugins

        def read() -> None:
            for test_file in files:
                if self._stop_reading.is_set():
                    return
                try:  # an empty observation: the static reading only, never the whole checkout
                    self.repo.inputs(test_file, plugins, Observation())
                except Exception:  # noqa: BLE001, S112 - key() reads it again and reports it
                    continue

        self._reader = threading.Thread(target=read, name="stagebot-key-inputs", daemon=True)
        self._reader.start()

    def key(self, test_id: str, observed: Observation | None = None) -> DependencyKey:
        if self._reader is not None:
            self._stop_reading.set()
            self._reader.join()
        return dependency_key(self.repo, test_id, self.family, self.environment, (), observed)

    def deselected(self, entry: MatrixEntry) -> MatrixEntry:
        """``entry`` with the tests reused by key deselected too."""
        if not self.reused:
            return entry
        return replace(entry, reused_tests=[*entry.reused_tests, *sorted(self.reused)])

    def write(self, out: Path, finished: Iterable[str] = ()) -> None:
        """``keys.json`` in the shard folder ``out``: the tests reused by key and the keys of
        the ``finished`` tests (those with an outcome), with what their run observed (``out``'s
        ``observed/``: a test file no session observed keeps its static key), written whole or
        not at all."""
        keys, files = [], {}
        finished = sorted(set(finished))
        observed = read_observations(out / OBSERVED, {t.split("::")[0] for t in finished})
        for test_id in finished:
            test_file = test_id.split("::")[0]
            key = self.key(test_id, observed.get(test_file))
            keys.append(
                {
                    "test_id": test_id,
                    "key": key.code,
                    "parts": key.parts,
                    "conservative": key.conservative[0] if key.conservative else None,
                    "test_file": test_file,
                }
            )
            if not key.conservative:  # the whole repository's digests are not worth keeping
                files[test_file] = {p: d[:FILE_DIGEST_CHARS] for p, d in key.files.items()}
        data = {
            "family": self.family.name,
            "reused": {t: list(v) for t, v in sorted(self.reused.items())},
            "audited": {t: list(v) for t, v in sorted(self.audited.items())},
            "audit": list(self.audit) if self.audit else None,
            "keys": keys,
            "files": files,
        }
        temporary = out / f".{KEYS_FILE}.partial"
        temporary.write_text(json.dumps(data), encoding="utf-8")
        os.replace(temporary, out / KEYS_FILE)


def _test_files(entry: MatrixEntry, files: Sequence[str]) -> list[str]:
    """The repository test files a shard's keys will be asked for: those of its test ids, or,
    for a shard that runs its suites whole, the files under the suites' paths that pytest's
    default ``python_files`` (``test_*.py``, ``*_test.py``) collects."""
    if entry.tests:
        return sorted({test_id.split("::")[0] for test_id in entry.tests})
    paths = [s["path"].rstrip("/") for s in entry.suites if not s.get("builtin")]
    return [
        path
        for path in files
        if any(path == p or path.startswith(f"{p}/") for p in paths)
        and (path.rsplit("/", 1)[-1].startswith("test_") or path.endswith("_test.py"))
        and path.endswith(".py")
    ]


@dataclass(frozen=True)
class Keyed:
    """What a shard's ``keys.json`` gives the ledger, after the trusted side checked it."""

    reused: Passed
    keys: list[RecordedKey]
    files: dict[str, dict[str, str]]
    refused: list[str]  # claimed reuses the ledger does not offer (named in the log)
    audited: Passed = field(default_factory=dict)  # run by the shard's audit (offered ones)
    audit: tuple[float, int] = (0.0, 0)  # the audit's (rate, seed)


def trusted(
    book,
    pipeline: int,
    family: str,
    default_branch: str,
    main_book=None,
    source: int | None = None,
) -> dict:
    """``Ledger.trusted_passes`` for pipeline ``pipeline`` (its PR and branch, as ``book``
    recorded them), in ``book`` and in ``main_book`` (main's ledger, when apart from the PR's):
    per test, the newest of the two (pipelines are numbered by one workflow's runs)."""
    record = book.pipeline(pipeline, with_results=False)
    pr, branch = (record.pr, record.branch) if record is not None else (None, None)
    found: dict = {}
    for ledger in (main_book, book):
        if ledger is None:
            continue
        passes = ledger.trusted_passes(
            family,
            pr=pr,
            branch=branch,
            default_branch=default_branch,
            exclude=pipeline,
            source=source,
        )
        for test, hit in passes.items():
            if test not in found or hit.pipeline > found[test].pipeline:
                found[test] = hit
    return found


def read_keys(
    folder: Path, stage: str, book, pipeline: int, default_branch: str, main_book=None
) -> Keyed | None:
    """The ``keys.json`` in the shard folder ``folder`` (None when there is none or it cannot
    be read: the shard's outcomes are recorded without keys). A claimed reuse stands only when
    the trusted lookup for this pipeline (``trusted``) offers the test from the same source."""
    path = folder / KEYS_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        family = stage_family(stage)
        if data.get("family") != family:
            return None
        keys = [RecordedKey(family=family, **_key_fields(k)) for k in data.get("keys", [])]
        claims = {str(t): (int(v[0]), float(v[1])) for t, v in data.get("reused", {}).items()}
        audits = {str(t): (int(v[0]), float(v[1])) for t, v in data.get("audited", {}).items()}
        rate, seed = data.get("audit") or (0.0, 0)
        audit = (float(rate), int(seed))
        files = {str(f): dict(m) for f, m in data.get("files", {}).items()}
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None
    offers = {
        source: trusted(book, pipeline, family, default_branch, main_book, source)
        for source in sorted({source for source, _ in (*claims.values(), *audits.values())})
    }
    reused, refused = {}, []
    for test_id, (source, _) in sorted(claims.items()):
        hit = offers[source].get(test_id)
        if hit is not None:
            reused[test_id] = (source, hit.duration_s)
        else:
            refused.append(test_id)
    # an audited test ran: a claim the ledger does not offer is no audit, and costs nothing
    audited = {t: (s, d) for t, (s, d) in sorted(audits.items()) if t in offers[s]}
    return Keyed(reused, keys, files, refused, audited, audit)


def with_refusals(result: StageResult, keyed: Keyed | None) -> StageResult:
    """``result`` with each refused reuse (a test the runner skipped as reused by key, which
    the ledger does not offer from that source to this pipeline) as an ERROR test: it neither
    passed nor ran, and must not look passed."""
    if keyed is None or not keyed.refused:
        return result
    errors = [
        TestOutcome(test_id, "error", 0.0, REFUSED, 1)
        for test_id in keyed.refused
        if test_id not in {t.test_id for t in result.tests}
    ]
    return replace(result, state="ERROR", tests=[*result.tests, *errors], evidence=REFUSED)


def _key_fields(data: dict[str, Any]) -> dict[str, Any]:
    parts = data["parts"]
    if not isinstance(parts, dict):
        raise TypeError("parts is not an object")
    return {
        "test_id": str(data["test_id"]),
        "key": str(data["key"]),
        "parts": {str(k): str(v) for k, v in parts.items()},
        "conservative": None if data.get("conservative") is None else str(data["conservative"]),
        "test_file": str(data["test_file"]),
    }
