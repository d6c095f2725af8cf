"""Why a test would or would not be reused by key (`bot stages --explain-reuse TEST`).

Compares the newest key the ledger recorded for the test with its key on the checkout at hand:
each part that differs, and for ``files`` each file added, removed or changed (the ledger keeps
a prefix of each file's digest; a conservative key keeps none: it is the whole repository's).
The environment and gpu parts are compared here with this machine's, which is the runner's only
when the test's stage runs here (a CPU stage on this machine; a GPU stage on its runner).
"""

from __future__ import annotations

from pathlib import Path

from stagebot.harness.reuse.dependency_key import (
    CODE_PARTS,
    DependencyKey,
    FamilyInputs,
    current_environment,
    dependency_key,
)
from stagebot.harness.reuse.offers import DIGEST_CHARS, FILE_DIGEST_CHARS
from stagebot.stages.errors import StagebotError


class ExplainError(StagebotError):
    """The test cannot be explained: the ledger has no key for it, or its family is gone."""


def explain_reuse(book, test_id: str, root: Path, catalog) -> list[str]:
    """Lines saying whether ``test_id``'s newest recorded run would be reused by key now, and
    which input changed (the ledger ``book``, the checkout ``root``, its ``catalog``)."""
    run = book.latest_key(test_id)
    if run is None:
        raise ExplainError(
            f"the ledger {book.path} has no dependency key for {test_id!r}: no run of it was "
            "recorded with keys (run it once with this stagebot; `bot stages --test ID` lists "
            "the stages that run it)"
        )
    family = next((f for f in catalog.families if f.name == run.family), None)
    if family is None:
        raise ExplainError(
            f"{test_id!r} last ran in stage family {run.family!r}, which the catalog no longer "
            "has: it would run (nothing to reuse it by)"
        )
    if run.pr is not None:
        where = f"PR {run.pr}"
    else:
        where = "main" if run.branch == "main" else f"branch {run.branch or '(none)'}"
    environment = current_environment(family.gpu_type)
    now = dependency_key(root, test_id, FamilyInputs.of(family, catalog.waives), environment)
    lines = [
        f"{test_id}",
        f"  latest run with a key: pipeline #{run.pipeline} ({where}), stage {run.stage}: "
        f"{run.outcome}",
        f"  key then: {run.key}   key now: {now.code}   (its {', '.join(CODE_PARTS)} parts)"
        + (f"   (conservative: {now.conservative[0]})" if now.conservative else ""),
        *(
            f"  {part} then: {_short(run.parts.get(part))}   now: {_short(now.parts[part])}"
            "   (now: this machine's)"
            for part in ("environment", "gpu")
        ),
    ]
    changed = changed_parts(run, now)
    faults = [f for f in book.reuse_faults() if f[1] == test_id and f[0] == run.family]
    if faults:
        _, _, pipeline, source, detail = faults[-1]
        why = f"a reuse fault was recorded in #{pipeline} (reused from #{source}, {detail})"
    elif run.outcome != "passed":
        why = f"its latest run ended {run.outcome}: only a pass is reused"
    elif changed:
        why = "an input changed"
    else:
        why = None
    if why:
        lines.append(f"  would be reused by key: no ({why})")
    else:
        scope = "by any PR" if where == "main" else f"by {where} only"
        lines.append(
            f"  would be reused by key: yes, from #{run.pipeline} ({scope}; the runner checks "
            "its environment and gpu parts before the shard starts)"
        )
    lines += [f"  changed: {reason}" for reason in changed] or ["  changed: nothing"]
    return lines


def changed_parts(run, now: DependencyKey) -> list[str]:
    """Each part of ``now`` that differs from the recorded ``run``; for ``files``, which."""
    reasons = []
    for part in (*CODE_PARTS, "environment", "gpu"):
        if run.parts.get(part) == now.parts.get(part):
            continue
        if part != "files":
            where = "" if part in CODE_PARTS else " (on this machine; a runner compares its own)"
            reasons.append(f"{part}{where}")
        elif run.conservative or now.conservative:
            blind = run.conservative or now.conservative[0]
            reasons.append(f"files: the whole repository (the key is conservative: {blind})")
        else:
            files = {path: digest[:FILE_DIGEST_CHARS] for path, digest in now.files.items()}
            differ = sorted(
                p for p in run.files.keys() | files.keys() if run.files.get(p) != files.get(p)
            )
            added = [p for p in differ if p not in run.files]
            removed = [p for p in differ if p not in files]
            edited = [p for p in differ if p in run.files and p in files]
            for label, paths in (("changed", edited), ("added", added), ("removed", removed)):
                if paths:
                    reasons.append(f"files {label}: {', '.join(paths)}")
    return reasons


def _short(digest: str | None) -> str:
    return digest[:DIGEST_CHARS] if digest else "(not recorded)"
