"""What `bot handle-event` tells the workflow (GITHUB_OUTPUT) and prints, for any event."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Outcome:
    reason: str
    run: bool = False
    matrix: list[dict[str, Any]] = field(default_factory=list)
    pipeline: int | None = None
    commit: str | None = None
    pr: int | None = None
    reply_id: int | None = None
    plan: dict[str, Any] | None = None
    notice: str | None = None  # what went wrong with the ledger handed to the job (a warning)

    def outputs(self) -> dict[str, str]:
        return {
            "run": "true" if self.run else "false",
            "matrix": json.dumps(self.matrix, separators=(",", ":")),
            "pipeline": str(self.pipeline or ""),
            "commit": self.commit or "",
            "pr": str(self.pr or ""),
            "reply_id": str(self.reply_id or ""),
        }
