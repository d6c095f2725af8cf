"""The reply marker: a hidden ``<!-- stagebot:{json} -->`` payload in the bot's PR reply.

It lets the bot find its own reply again (to edit it in place), handle each triggering comment
once, and read a compact pipeline summary back (schema: bot/schemas/reply_marker.v1.json).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from stagebot.stages.errors import StagebotError

MARKER_VERSION = 1
PIPELINE_STATES = ("RUNNING", "SUCCESS", "FAILURE", "ABORTED", "NOT_RUN")
# The bot's own position: the body's last line (render() never writes a newline), optionally
# preceded by the ledger digest line. Anything marker-like elsewhere (user text that escaped
# escaping, a quote) is never read.
TAIL = re.compile(
    r"(?:^<!-- stagebot-ledger:sha256:(?P<digest>[0-9a-f]{64})(?: run:(?P<run>[1-9][0-9]{0,18}))?"
    r" -->\n)?"
    r"^<!-- stagebot:(?P<payload>\{[^\n]*\}) -->[ \t\r\n]*\Z",
    re.MULTILINE,
)


class MarkerError(StagebotError):
    """A marker whose payload is not a valid reply marker."""


@dataclass(frozen=True)
class ReplyMarker:
    pipeline: int
    commit: str
    comment_id: int  # the triggering comment
    state: str  # RUNNING | SUCCESS | FAILURE | ABORTED | NOT_RUN
    stages: dict[str, str] = field(default_factory=dict)  # stage -> StageResult state
    # the stage runs the bot's own dispatch started for this pipeline, one per stage (`bot
    # dispatch` records them): the only runs /bot kill and a superseding /bot run ever cancel
    stage_runs: tuple[int, ...] = ()

    @property
    def done(self) -> int:
        """How many of its stages the reply shows finished by a stage run (neither PENDING nor
        REUSED, which the triggered reply already lists): a partial report replaces the reply
        only when it knows more of its runs finished (bot/actions/report_run.py)."""
        return sum(state not in ("PENDING", "REUSED") for state in self.stages.values())

    def render(self) -> str:
        fields = {k: v for k, v in asdict(self).items() if k != "stage_runs"}
        if self.stage_runs:
            fields["stage_runs"] = list(self.stage_runs)
        payload = json.dumps(
            {"version": MARKER_VERSION, **fields}, sort_keys=True, separators=(",", ":")
        )
        # ">" never appears raw, so the payload cannot close the HTML comment early.
        return "<!-- stagebot:" + payload.replace(">", "\\u003e") + " -->"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReplyMarker:
        if data.get("version") != MARKER_VERSION:
            raise MarkerError(f"unsupported reply marker version {data.get('version')!r}")
        try:
            marker = cls(
                data["pipeline"],
                data["commit"],
                data["comment_id"],
                data["state"],
                dict(data.get("stages", {})),
                _stage_runs(data),
            )
        except (KeyError, TypeError) as error:
            raise MarkerError(f"reply marker lacks or mistypes {error}") from None
        bad = [run for run in marker.stage_runs if type(run) is not int or run < 1]
        if bad:
            raise MarkerError(f"reply marker stage_runs {bad!r} are not run ids")
        if marker.state not in PIPELINE_STATES:
            raise MarkerError(
                f"reply marker state {marker.state!r} is not one of {PIPELINE_STATES}"
            )
        return marker


def _stage_runs(data: dict[str, Any]) -> tuple:
    """The marker's ``stage_runs``. A reply posted before one stage run per stage names its one
    run as ``stage_run``: read as a one-item ``stage_runs``, so /bot kill or a newer /bot run
    still cancels a pipeline that was running when the bot was upgraded."""
    if "stage_runs" not in data and "stage_run" in data:
        return (data["stage_run"],)
    return tuple(data.get("stage_runs", ()))


def with_marker(body: str, marker: ReplyMarker) -> str:
    """``body`` (one of the bot's replies) with its marker, the last line, replaced."""
    match = TAIL.search(body)
    if match is None:
        raise MarkerError("the reply has no marker at its end")
    start = match.start("payload") - len("<!-- stagebot:")
    return body[:start] + marker.render() + "\n"


def find_marker(body: str) -> ReplyMarker | None:
    """The marker of a comment body, read only from the bot's own position: the body's last
    line, because the bot always ends its replies with it; anything marker-like earlier in the
    body (user text that was not escaped, a quote) can neither replace nor hide it. None when
    there is none; a malformed marker raises MarkerError. Callers must also check who wrote the
    comment (bot/comments/replies.py's our_replies counts only the bot login's comments): anyone can
    paste a marker into their own comment."""
    match = TAIL.search(body)
    if match is None:
        return None
    try:
        data = json.loads(match["payload"])
    except json.JSONDecodeError as error:
        raise MarkerError(f"reply marker payload is not JSON: {error}") from None
    return ReplyMarker.from_json(data)


# The ledger's digest, a second hidden line the bot writes just before its marker: the sha256 of
# the ledger file the bot saved for the PR's next pipeline, and the workflow run that uploads it
# (the job that wrote the reply). handle-event accepts a restored ledger only when one of the
# bot's own replies names its digest, and bot/custody/transport.py fetches it from that run's own
# artifacts (never by searching names, which any workflow can squat). Read only from the line
# right above the marker (TAIL): a digest line anywhere else in a reply vouches for nothing. Not
# part of the marker's schema.


@dataclass(frozen=True)
class LedgerRecord:
    digest: str  # the ledger file's sha256
    run_id: int | None  # the run whose artifact holds it; None in replies before trust v3


def render_ledger_digest(digest: str, run_id: int | None = None) -> str:
    run = f" run:{run_id}" if run_id is not None else ""
    return f"<!-- stagebot-ledger:sha256:{digest}{run} -->"


def find_ledger_record(body: str) -> LedgerRecord | None:
    match = TAIL.search(body)
    if match is None or not match["digest"]:
        return None
    return LedgerRecord(match["digest"], int(match["run"]) if match["run"] else None)


def find_ledger_digests(body: str) -> set[str]:
    record = find_ledger_record(body)
    return {record.digest} if record else set()
