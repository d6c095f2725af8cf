"""An adopted repository is stagebot's home on the adopter's machine: a realistic sample
(tests/helpers/sample_project.py) after `bot init --write`, driven with `bot` as a new user
would, from its folders and without `--catalog`.

- every local command finds the repository's catalog from any folder of it (stagebot's shipped
  catalog only in stagebot's own repository), and a report's re-run hint works when pasted;
- a stage that could not run (no GPU here) makes the pipeline NOT_RUN, exit 4, with the words
  and the status decision the GitHub reply has for the same record;
- stagebot's pytest plug-in loads in the shards stagebot starts, never in the adopter's own
  pytest sessions in the same virtual environment;
- `bot run … | head -1` records the pipeline's true state: a closed stdout is not an abort.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from helpers.sample_project import adopted_sample, bot

from stagebot.harness.ledger.book import Ledger
from stagebot.harness.ledger.location import default_ledger
from stagebot.harness.report import reply_completed, report_from_record

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
STAGES = {
    "CPU-PyTorch-Core-1",
    "DGX_H200-PyTorch-Core-1",
    "CPU-PyTorch-Ops-1",
    "DGX_H200-PyTorch-Ops-1",
}


@pytest.fixture
def repo(tmp_path) -> Path:
    return adopted_sample(tmp_path)


def _shell(command: str, cwd: Path) -> subprocess.CompletedProcess:
    """``command`` in bash, with this environment's `bot` first on the PATH (a user's shell)."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env={**os.environ, "PATH": path},
        capture_output=True,
        text=True,
        timeout=600,
    )


def _pipeline(repo: Path, number: int):
    with Ledger.open(default_ledger(repo), readonly=True) as book:
        return book.pipeline(number)


def test_every_local_command_finds_the_repositorys_catalog_from_any_folder(repo, tmp_path) -> None:
    plan = bot(repo / "tests/ops", "dry-run", "--json", "/bot run")
    assert plan.returncode == 0, plan.stderr
    assert {shard["stage"] for shard in json.loads(plan.stdout)["shards"]} == STAGES
    listed = bot(repo / "src/gridkit", "stages", "--list")
    assert listed.returncode == 0 and "CPU-PyTorch-Core-1" in listed.stdout
    assert "A10" not in listed.stdout and "AutoDeploy" not in listed.stdout
    outside = bot(tmp_path, "dry-run", "/bot run")
    assert outside.returncode == 2 and outside.stdout == ""
    assert outside.stderr.startswith("Error: no .github/stagebot-init.yml in ")
    assert "run `bot init` in your repository's root first, or give --catalog PATH" in (
        outside.stderr
    )
    # the control: stagebot's own repository plans stagebot's own (shipped) catalog
    own = bot(ROOT, "dry-run", "--json", "/bot run --gpu-type CPU")
    assert own.returncode == 0, own.stderr
    assert not {shard["stage"] for shard in json.loads(own.stdout)["shards"]} & STAGES


def test_a_re_run_hint_works_when_pasted(repo, tmp_path) -> None:
    ledger = tmp_path / "history" / "ledger.sqlite"
    ledger.parent.mkdir()
    first = bot(
        repo / "tests", "run", "--ledger", str(ledger), '/bot run --stage-list "CPU-PyTorch-Core-1"'
    )
    assert first.returncode == 0, first.stdout + first.stderr
    hint = re.search(r"Run `(bot run [^`]+)` again", first.stdout)[1]
    assert f"--ledger {ledger}" in hint
    pasted = _shell(hint, repo / "tests")
    assert pasted.returncode == 0, pasted.stdout + pasted.stderr
    assert "pipeline #2 [ run ] completed with state SUCCESS" in pasted.stdout
    with Ledger.open(ledger, readonly=True) as book:
        (shard,) = book.pipeline(2).results
    assert (shard.stage, shard.state, shard.reused_from) == ("CPU-PyTorch-Core-1", "REUSED", 1)


CATALOG = ".github/stagebot/catalog"  # given where a test is not about finding it


def test_a_stage_that_could_not_run_is_not_a_pass_here_or_on_github(repo) -> None:
    done = bot(repo, "run", "--catalog", CATALOG, "/bot run")
    assert done.returncode == 4, done.stdout + done.stderr
    headline = (
        '⚠️ Everything that ran passed, but 2 shard(s) could not run (see "Not run") — not a pass.'
    )
    assert "pipeline #1 [ run ] completed with state NOT_RUN" in done.stdout
    assert headline in done.stdout
    record = _pipeline(repo, 1)
    assert record.state == "NOT_RUN"
    states = {result.stage: result.state for result in record.results}
    assert states == {
        "CPU-PyTorch-Core-1": "SUCCESS",
        "CPU-PyTorch-Ops-1": "SUCCESS",
        "DGX_H200-PyTorch-Core-1": "NOT_RUN",
        "DGX_H200-PyTorch-Ops-1": "NOT_RUN",
    }
    # the same record, reported as the bot reports a PR's pipeline: one decision and wording
    github = report_from_record(replace(record, pr=3, meta={**record.meta, "local": False}))
    assert (github.analysis.state, github.exit_code) == ("NOT_RUN", 4)
    assert github.headline() == headline
    assert github.status.state == "error"
    assert "could not run 2 stage(s): not a pass" in github.status.description
    assert "error" in reply_completed(github)


def test_stagebots_plugin_stays_out_of_the_users_own_pytest(repo) -> None:
    own = subprocess.run(
        [sys.executable, "-m", "pytest", "--help"], cwd=repo, capture_output=True, text=True
    )
    assert own.returncode == 0, own.stderr
    assert "--stagebot-jsonl" not in own.stdout, "stagebot's plug-in loaded into the user's pytest"
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:randomly", "tests/core", "-m", "not gpu"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert tests.returncode == 0 and "gridkit stamp plug-in" in tests.stdout, tests.stdout
    # the control: a shard stagebot starts loads it (its test stream is the plug-in's)
    done = bot(repo, "run", "--catalog", CATALOG, '/bot run --stage-list "CPU-PyTorch-Core-1"')
    assert done.returncode == 0, done.stdout + done.stderr
    state = Path(os.environ["XDG_STATE_HOME"])  # tests/conftest.py: this test's own
    (stream_file,) = state.glob("stagebot/*/pipeline-1/CPU-PyTorch-Core-1/tests.jsonl")
    stream = stream_file.read_text()
    assert '"event": "result"' in stream and "test_total" in stream


def test_a_closed_stdout_stops_the_output_not_the_pipeline(repo) -> None:
    """Its only stage runs (seconds) after the first line: `head` has gone when it reports."""
    run = f"bot run --catalog {CATALOG} '/bot run --stage-list \"CPU-PyTorch-Ops-1\"'"
    piped = _shell(f'{run} | head -1; echo "bot exit: ${{PIPESTATUS[0]}}"', repo)
    lines = piped.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("pipeline #1 [ run ] triggered by "), lines
    assert lines[1] == "bot exit: 0", piped.stdout + piped.stderr
    assert "Traceback" not in piped.stderr and "BrokenPipe" not in piped.stderr, piped.stderr
    assert "ABORTED" not in piped.stderr
    record = _pipeline(repo, 1)
    assert record.state == "SUCCESS", "its true state, not ABORTED"
    assert [(r.stage, r.state) for r in record.results] == [("CPU-PyTorch-Ops-1", "SUCCESS")]
    report = bot(repo, "report", "--format", "text")
    assert "Cancelled" not in report.stdout and "state **SUCCESS**" in report.stdout
