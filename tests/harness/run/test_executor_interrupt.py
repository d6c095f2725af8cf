"""Ctrl-C wherever it lands: every shard of the run is recorded, the queued ones ABORTED too."""

from __future__ import annotations

from fixtures.botrun import CATALOG, ROOT

from stagebot.bot.comments.grammar import parse_comment
from stagebot.harness.run.executor import STOPPED, Settings, execute
from stagebot.harness.run.progress import Progress
from stagebot.stages.catalog import load_catalog
from stagebot.stages.planner import plan_run


class InterruptedProgress(Progress):
    """Ctrl-C arrives while the main loop redraws the progress line (not inside its wait)."""

    def tick(self) -> None:
        raise KeyboardInterrupt


def test_ctrl_c_outside_the_wait_records_the_queued_shards_aborted(tmp_path) -> None:
    catalog = load_catalog(CATALOG)
    stages = "CPU-PyTorch-Hang-1, CPU-PyTorch-Slow-1, CPU-Build_Check"
    command = parse_comment(f'/bot run --stage-list "{stages}" --disable-fail-fast')
    plan = plan_run(command, catalog, commit="c0ffee")
    settings = Settings(out_dir=tmp_path / "out", root=ROOT, cpu_slots=1, devices=[])
    execution = execute(plan, catalog, 1, settings, progress=InterruptedProgress())
    assert execution.cancelled
    states = {r.stage: (r.state, r.evidence) for r in execution.results}
    assert set(states) == {s.strip() for s in stages.split(",")}, states
    queued = [
        stage for stage, (state, why) in states.items() if (state, why) == ("ABORTED", STOPPED)
    ]
    assert len(queued) == 2, states  # the one that ran is recorded as it ended
