"""The names other programs read, each with its one formatter and its one parser.

- **Stage run title** (stage.yml's ``run-name``, rendered by GitHub from the dispatch inputs):
  ``stagebot <key> pipeline <N> plan-run <ID> part <K>``, key ``pr-<PR>`` or ``main``, K the
  stage's place in the plan (one stage run per stage: the title tells a pipeline's runs apart).
  The title is set by whoever dispatched, so it only tells the report where to look
  (bot/protocols/runs.py checks the run it names).
- **Artifact names**: a stage job's results ``stagebot-result-<stage>``; the plan job's plan and
  dispatch record ``stagebot-plan``; a PR ledger ``stagebot-ledger-<sha256>``; main's ledger
  ``stagebot-ledger-main``. The workflows' upload steps are checked against these formatters
  (tests/test_workflows.py).

Elsewhere, with their parsers beside them: the reply marker and the ledger-digest line
(bot/protocols/marker.py), the ``stagebot/ledger`` status (bot/custody/main_ledger.py), the gating
status text (harness/report/status_text.py).
"""

from __future__ import annotations

import re

# ---- stage run title
_TITLE = re.compile(
    r"^stagebot (?P<key>pr-(?P<pr>[1-9]\d{0,9})|main) pipeline (?P<pipeline>[1-9]\d{0,9}) "
    r"plan-run (?P<plan_run>[1-9]\d{0,18})(?: part [1-9]\d{0,3})?$"
)


def stage_key(pr: int | None) -> str:
    """The title's key (stage.yml's ``key`` input): ``pr-N``, or ``main`` for post-merge."""
    return f"pr-{pr}" if pr else "main"


def stage_title(pr: int | None, pipeline: int, plan_run: int, part: int) -> str:
    """What stage.yml's run-name renders for these dispatch inputs."""
    return f"stagebot {stage_key(pr)} pipeline {pipeline} plan-run {plan_run} part {part}"


def parse_title(title: str) -> tuple[str, int, int] | None:
    """(key, pipeline, plan run) from a stage run's title (its part is the dispatch record's
    business); None for any other title."""
    match = _TITLE.match(title)
    if match is None:
        return None
    return match["key"], int(match["pipeline"]), int(match["plan_run"])


# ---- artifact names
RESULT_PREFIX = "stagebot-result-"
PLAN_ARTIFACT = "stagebot-plan"
LEDGER_PREFIX = "stagebot-ledger-"
MAIN_LEDGER = LEDGER_PREFIX + "main"
_DIGEST = re.compile(r"[0-9a-f]{64}")


def result_artifact(stage: str) -> str:
    """The artifact a stage job uploads its shard folder as."""
    return RESULT_PREFIX + stage


def result_stage(name: str) -> str | None:
    """The stage a result artifact's name names; None for any other artifact."""
    stage = name.removeprefix(RESULT_PREFIX)
    return stage if name.startswith(RESULT_PREFIX) and stage else None


def ledger_artifact(digest: str) -> str:
    """The artifact a PR ledger with this sha256 is uploaded as."""
    if not _DIGEST.fullmatch(digest):
        raise ValueError(f"a ledger artifact is named by a sha256 (64 hex digits), not {digest!r}")
    return LEDGER_PREFIX + digest


def ledger_digest(name: str) -> str | None:
    """The sha256 a PR ledger artifact's name carries; None for any other name (main's too)."""
    digest = name.removeprefix(LEDGER_PREFIX)
    return digest if name.startswith(LEDGER_PREFIX) and _DIGEST.fullmatch(digest) else None
