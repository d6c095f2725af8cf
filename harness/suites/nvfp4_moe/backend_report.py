"""Per-op tally of which backend ran each case of the suite, and the forced-backend verdict.

Pure bookkeeping, kept apart from the pytest glue in conftest.py.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class BackendTally:
    forced: str | None  # the --moe-backend name, None when backends are picked automatically
    ran: dict[str, Counter[str]] = field(default_factory=dict)  # op -> backend -> cases
    skipped: Counter[str] = field(default_factory=Counter)  # op -> cases
    violations: list[str] = field(default_factory=list)

    def add_ran(self, nodeid: str, op: str, backends: set[str]) -> None:
        used = backends or {"(none dispatched)"}
        for backend in used:
            self.ran.setdefault(op, Counter())[backend] += 1
        if self.forced is not None and used != {self.forced}:
            self.violations.append(f"{nodeid}: {op} ran on {sorted(used)}, not {self.forced}")

    def add_skipped(self, nodeid: str, op: str, reason: str) -> None:
        self.skipped[op] += 1
        if self.forced is not None:
            self.violations.append(f"{nodeid}: skipped ({reason})")

    def lines(self) -> list[str]:
        """A table: one row per op, one column per backend that ran, then the skips."""
        ops = sorted(set(self.ran) | set(self.skipped))
        if not ops:
            return []
        names = sorted({b for counts in self.ran.values() for b in counts})
        columns = [*names, "skipped"]
        width = max(len(op) for op in ops) + 2
        header = "op".ljust(width) + "".join(c.rjust(max(len(c), 7) + 2) for c in columns)
        rows = [header]
        for op in ops:
            counts = [self.ran.get(op, Counter())[b] for b in names] + [self.skipped[op]]
            cells = "".join(
                str(n).rjust(max(len(c), 7) + 2) for c, n in zip(columns, counts, strict=True)
            )
            rows.append(op.ljust(width) + cells)
        return rows
