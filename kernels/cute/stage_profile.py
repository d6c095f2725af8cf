"""Where a profiled `bot run` of a stage spends its time (stage_times.sh with PROFILE=1).

    python3 -m stagebot.kernels.cute.stage_profile PROFILE RUN_FOLDER

PROFILE is cProfile's output for the whole `bot run` (wall clock: a wait on a subprocess counts
as its time); RUN_FOLDER is the run's --out. Prints the stagebot functions (and the subprocess
waits) that took at least a third of a second in all, slowest first, then, from each shard's
tests.jsonl, pytest's session: its first test's start to its end, and the test functions and
tests that took longest.
"""

from __future__ import annotations

import json
import pstats
import re
import sys
from collections import defaultdict
from pathlib import Path

MIN_S = 0.33
TOP = 12
ROOT = str(Path(__file__).resolve().parents[2])  # the checkout (an editable install's files)


def function_lines(profile: Path) -> list[str]:
    stats = pstats.Stats(str(profile))
    total = stats.total_tt
    lines = [f"profile: {total:.1f} s in the `bot run` process (wall clock)"]
    rows = []
    for (path, line, name), (_, calls, _, cumulative, _) in stats.stats.items():
        ours = path.startswith(ROOT) or path.endswith("subprocess.py")
        if ours and cumulative >= MIN_S:
            where = path.removeprefix(ROOT + "/")
            text = f"{cumulative:7.2f} s  {calls:>5} x  {name}  ({where}:{line})"
            rows.append((cumulative, text))
    lines += [text for _, text in sorted(rows, reverse=True)]
    return lines


def session_lines(run_folder: Path) -> list[str]:
    lines = []
    for stream in sorted(run_folder.rglob("tests.jsonl")):
        records = [json.loads(text) for text in stream.read_text().splitlines() if text.strip()]
        starts = [r["time"] for r in records if r.get("event") == "start"]
        ends = [r["time"] for r in records if r.get("event") == "session_end"]
        results = [r for r in records if r.get("event") == "result" and r.get("phase") != "collect"]
        if not starts or not ends:
            lines.append(f"{stream}: no session")
            continue
        total = sum(r["duration_s"] for r in results)
        lines.append(
            f"{stream.parent.name}: first test to session end {ends[-1] - min(starts):.1f} s, "
            f"{len(results)} tests, their own durations {total:.1f} s"
        )
        by_function: dict[str, list[float]] = defaultdict(list)
        for r in results:
            by_function[re.sub(r"\[.*", "", r["test_id"])].append(r["duration_s"])
        slow = sorted(by_function.items(), key=lambda item: -sum(item[1]))[:TOP]
        lines += [f"  {sum(d):7.2f} s  {len(d):>4} x  {name}" for name, d in slow]
        lines += [
            f"  {r['duration_s']:7.2f} s  slowest: {r['test_id']}"
            for r in sorted(results, key=lambda r: -r["duration_s"])[:TOP]
        ]
    return lines


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    profile, run_folder = Path(args[0]), Path(args[1])
    print("\n".join(function_lines(profile) + session_lines(run_folder)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
