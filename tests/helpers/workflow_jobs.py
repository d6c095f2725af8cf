"""The bot's workflow jobs, played against the fake GitHub (real PyGithub over HTTP): one driver
for every end-to-end test of a pipeline.

Two ways a pipeline's jobs hand things on, both driven here:

- as on GitHub (bot.yml, the dispatched stage.yml runs, one per stage, report.yml): `plan`,
  `push`, `stages` (or one `stage`), `report`, `whole`. Every job starts in an empty folder;
  the ledger, the plan and the results travel as artifacts on the fake server.
- with the ledger as a file beside the jobs (`bot handle-event`, `bot run-stage`, then
  `bot publish` itself): `handle_comment`, `handle_push`, `stage_jobs`, `publish`,
  `publish_whole`, `post_merge`.

Both share the Actions environment, the events, the in-process `bot` and the stage jobs'
`bot run-stage` (a real process in the pinned checkout, here the repository)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from github_server import FakeGitHub, user_id

from helpers.cli import bot
from helpers.fake_pr import PR, SHA
from stagebot.bot.protocols.dispatch_inputs import NO_STAGE
from stagebot.harness.ledger.book import Ledger

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "tests" / "fixtures" / "events"
CATALOG = """
gpu_types:
  CPU: {{device_names: [], runner_labels: [ubuntu-latest]}}
families:
  - name: CPU-PyTorch
    kind: test
    timeout_minutes: 2
    suites: [{{path: tests/fixtures/suites/{suite}}}]
  - name: CPU-Build_Check
    kind: build
    timeout_minutes: 2
    command: echo built > "$STAGEBOT_WORK/out.txt" && test -s "$STAGEBOT_WORK/out.txt"
"""
# Only stops a hung process; a `bot run-stage` of the fixture suites takes seconds.
HANG_S = 600


@pytest.fixture
def gh():
    """The fake GitHub with the PR, its author and the collaborators who comment."""
    with FakeGitHub() as server:
        server.add_pull(PR, head_sha=SHA, files=("src/x.py",))
        server.grant("writer", "write")
        server.grant("maintainer", "maintain")
        server.grant("contributor", "write")  # the PR's author: run needs no --sha
        yield server


@pytest.fixture
def jobs(gh, tmp_path, monkeypatch, capsys) -> Jobs:
    return Jobs(gh, tmp_path, monkeypatch, capsys)


def ledger_state(jobs: Jobs, number: int) -> str:
    """Pipeline ``number``'s state in the ledger file (`publish`'s way)."""
    # Closed at once: an open reader keeps the -wal file, which the next job would refuse.
    with Ledger.open(jobs.ledger, readonly=True) as book:
        return book.pipeline(number).state


class Jobs:
    """The jobs of one repository's workflows; run ``n`` of bot.yml is Actions run 50000 + n."""

    def __init__(self, gh: FakeGitHub, tmp: Path, monkeypatch, capsys, suite="check_basic.py"):
        self.gh, self.tmp, self.monkeypatch, self.capsys = gh, tmp, monkeypatch, capsys
        self.catalog = tmp / "catalog.yaml"
        self.catalog.write_text(CATALOG.format(suite=suite))
        self.ledger = tmp / "ledger.sqlite"  # the file `publish` and its plan jobs share
        self.python = sys.executable  # the stage jobs' interpreter
        self.job_count = 0
        self.events: dict[int, tuple[str, dict]] = {}
        monkeypatch.chdir(tmp)

    # ---- shared by both ways

    def job(self, name: str) -> Path:
        """A fresh, empty folder for the next job, made the current one."""
        self.job_count += 1
        folder = self.tmp / f"job-{self.job_count}-{name}"
        folder.mkdir()
        self.monkeypatch.chdir(folder)
        return folder

    def env(self, run_id: int, event_name: str, payload: dict, run_number: int) -> None:
        """The Actions environment of run ``run_id``, triggered by ``payload``."""
        self.events[run_id] = (event_name, payload)
        event = self.tmp / f"event-{run_id}.json"
        event.write_text(json.dumps(payload))
        output = self.tmp / f"output-{run_id}.txt"
        output.write_text("")
        for key, value in {
            "GITHUB_EVENT_NAME": event_name,
            "GITHUB_EVENT_PATH": str(event),
            "GITHUB_REPOSITORY": self.gh.repo,
            "GITHUB_API_URL": self.gh.url,
            "GITHUB_SERVER_URL": self.gh.base,
            "GITHUB_TOKEN": "ghs_test",
            "GITHUB_RUN_ID": str(run_id),
            "GITHUB_RUN_NUMBER": str(run_number),
            "GITHUB_OUTPUT": str(output),
            "STAGEBOT_GITHUB_BACKOFF_S": "0.001",
            "STAGEBOT_GITHUB_THROTTLE_S": "0",
            "STAGEBOT_GITHUB_TIMEOUT_S": "60",  # only stops a hang: no fault here holds an answer
            "STAGEBOT_PLAN_WAIT_S": "0",
        }.items():
            self.monkeypatch.setenv(key, value)

    def outputs(self, run_id: int) -> dict[str, str]:
        """What run ``run_id``'s last job wrote to $GITHUB_OUTPUT."""
        text = (self.tmp / f"output-{run_id}.txt").read_text()
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)

    def bot(self, *args: str, code: int = 0) -> str:
        """`bot ARGS…` as a job's step runs it; checks its exit code, returns its output."""
        got, out, err = bot(self.capsys, *args)
        assert got == code, out + err
        return out + err

    def comment_event(self, body: str, number: int, author: str, comment_id: int) -> dict:
        """``author`` comments ``body`` on the PR: the comment, and its issue_comment event."""
        payload = json.loads((EVENTS / "pr_comment_created.json").read_text())
        payload["comment"].update(id=comment_id, body=body)
        payload["comment"]["user"]["login"] = author
        payload["comment"]["user"]["id"] = user_id(author)
        payload["issue"]["number"] = number
        self.gh.add_comment(number, body, author, comment_id=comment_id)
        return payload

    def run_stage(self, entry: dict, results: Path) -> None:
        """A stage job: `bot run-stage` of one matrix entry, in the pinned checkout (here)."""
        done = subprocess.run(
            [self.python, "-c", "from stagebot.bot.cli.main import main; main()"]
            + ["run-stage", "--entry", json.dumps(entry), "--out", str(results)],
            cwd=ROOT,
            env={k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")},
            capture_output=True,
            text=True,
            timeout=HANG_S,
        )
        assert done.returncode in (0, 1), done.stdout + done.stderr

    # ---- as on GitHub: bot.yml, the dispatched stage.yml run, report.yml

    def plan(self, body: str, number: int, author: str = "writer", pr: int = PR) -> dict[str, str]:
        """The plan job of bot.yml run ``number`` for a comment on ``pr``; its outputs (and the
        stage run's id)."""
        run_id = 50000 + number
        self.gh.add_run(number, run_id=run_id)
        payload = self.comment_event(body, pr, author, 7000 + number)
        self.env(run_id, "issue_comment", payload, number)
        return self._plan_job(run_id)

    def push(self, number: int, sha: str | None = None) -> dict[str, str]:
        """The plan job of bot.yml run ``number`` on a push to main (of ``sha``, default the
        event file's); its outputs (and log)."""
        run_id = 50000 + number
        self.gh.add_run(number, run_id=run_id, event="push")
        payload = json.loads((EVENTS / "push_main.json").read_text())
        payload["after"] = sha or payload["after"]
        if payload["after"] not in self.gh.main_commits:
            self.gh.main_commits.insert(0, payload["after"])
        self.env(run_id, "push", payload, number)
        return self._plan_job(run_id)

    def _plan_job(self, run_id: int) -> dict[str, str]:
        self.job("plan")
        log = self.bot("fetch-ledger", "--out", ".stagebot/ledger.sqlite")
        log += self.bot(
            "handle-event", "--catalog", str(self.catalog),
            "--ledger", ".stagebot/ledger.sqlite", "--out", ".stagebot/plan",
        )  # fmt: skip
        outputs = self.outputs(run_id)
        outputs["log"] = log
        if outputs["run"] == "true":
            self.bot("dispatch", "--plan-dir", ".stagebot/plan")
            plan = Path(".stagebot/plan")
            self.gh.add_artifact(
                run_id,
                "stagebot-plan",
                {n: (plan / n).read_bytes() for n in ("plan.json", "dispatch.json")},
            )
            runs = json.loads((plan / "dispatch.json").read_text())["stage_runs"]
            outputs["stage_runs"] = runs  # stage -> its stage run
            outputs["stage_run"] = next(iter(runs.values()))  # the first stage's
        if outputs.get("ledger_digest"):
            ledger = Path(".stagebot/ledger.sqlite").read_bytes()
            self.gh.add_artifact(run_id, outputs["ledger_artifact"], {"ledger.sqlite": ledger})
        self.gh.runs[run_id].update(status="completed", conclusion="success")
        return outputs

    def stages(self, outputs: dict, conclusion: str = "success") -> int:
        """The dispatched stage runs, one per stage: `bot run-stage` of its entry, its result
        artifact; returns the first stage's run (reporting any one after all have finished
        reports the whole pipeline)."""
        for stage in outputs["stage_runs"]:
            self.stage(outputs, stage, conclusion)
        return outputs["stage_run"]

    def stage(self, outputs: dict, stage: str, conclusion: str = "success") -> int:
        """Stage ``stage``'s dispatched run: `bot run-stage` of its entry, its result artifact,
        then the run completes with ``conclusion``; returns the run's id."""
        run_id = outputs["stage_runs"][stage]
        (dispatch,) = [d for d in self.gh.dispatches if d["run_id"] == run_id]
        matrix = json.loads(dispatch["inputs"]["matrix"])
        if stage == NO_STAGE:  # every shard reused: a run without jobs
            assert matrix == [] == json.loads(outputs["matrix"])
        else:
            (entry,) = matrix
            assert entry in json.loads(outputs["matrix"]) and entry["stage"] == stage
            heads = {pull["head"]["sha"] for pull in self.gh.pulls.values()}
            assert entry["commit"] in heads or outputs.get("commit") == entry["commit"]
            folder = self.job("stage")
            self.run_stage(entry, folder / "results")
            self.upload_results(run_id, stage, folder / "results")
        self.gh.runs[run_id].update(status="completed", conclusion=conclusion)
        return run_id

    def upload_results(self, run_id: int, stage: str, results: Path, extra=None) -> None:
        files = {
            str(p.relative_to(results)): p.read_bytes()
            for p in (results / stage).rglob("*")
            if p.is_file()
        }
        self.gh.add_artifact(run_id, f"stagebot-result-{stage}", {**files, **(extra or {})})

    def report(self, stage_run: int, number: int) -> tuple[dict[str, str], str]:
        """report.yml's job for a completed stage run of pipeline ``number``: (its outputs, its
        log). The pipeline's first report run is 60000 + number, each next one 1000 more."""
        run_id = 60000 + number
        while run_id in self.gh.runs:
            run_id += 1000
        self.gh.add_run(
            number, run_id=run_id, path=".github/workflows/report.yml", event="workflow_run"
        )
        payload = {
            "action": "completed",
            "workflow_run": {"id": stage_run},
            "repository": {"full_name": self.gh.repo, "default_branch": "main"},
        }
        self.env(run_id, "workflow_run", payload, number)
        self.job("report")
        log = self.bot("report-run", "--run-id", str(stage_run), "--work", ".stagebot")
        outputs = self.outputs(run_id)
        if outputs["published"] == "true":
            ledger = Path(outputs["ledger"]).read_bytes()
            self.gh.add_artifact(run_id, outputs["ledger_artifact"], {"ledger.sqlite": ledger})
        self.gh.runs[run_id].update(status="completed", conclusion="success")
        return outputs, log

    def whole(self, body: str, number: int, pr: int = PR) -> dict[str, str]:
        """Plan, stage run and report of a comment on ``pr``; the plan job's outputs."""
        outputs = self.plan(body, number, pr=pr)
        assert outputs["run"] == "true", outputs
        self.report(self.stages(outputs), number)
        return outputs

    # ---- with the ledger as a file beside the jobs, and `bot publish` itself

    def handle_comment(
        self, body: str, number: int, author="writer", comment_id=None, pr: int = PR
    ) -> dict:
        """`bot handle-event` on a new comment on ``pr`` (run ``number``); its outputs."""
        payload = self.comment_event(body, pr, author, comment_id or 7000 + number)
        self.env(50000 + number, "issue_comment", payload, number)
        return self._handle_event(number)[0]

    def handle_push(self, number: int) -> tuple[dict, str]:
        """`bot handle-event` on push_main.json (run ``number``): (its outputs, its log)."""
        payload = json.loads((EVENTS / "push_main.json").read_text())
        self.env(50000 + number, "push", payload, number)
        return self._handle_event(number)

    def _handle_event(self, number: int) -> tuple[dict, str]:
        plan = self.tmp / f"plan-{number}"
        log = self.bot(
            "handle-event", "--catalog", str(self.catalog), "--ledger", str(self.ledger),
            "--out", str(plan),
        )  # fmt: skip
        return json.loads((plan / "outputs.json").read_text()), log

    def stage_jobs(self, outputs: dict, number: int) -> Path:
        """`bot run-stage` per matrix entry; the folder of their results."""
        results = self.tmp / f"results-{number}"
        for entry in json.loads(outputs["matrix"]):
            self.run_stage(entry, results)
        return results

    def publish(
        self, number: int, results: Path, *extra: str, code: int = 0, plan: bool = True
    ) -> str:
        """`bot publish` of run ``number``'s results (with its plan.json unless not ``plan``)."""
        run_id = 50000 + number
        self.env(run_id, *self.events[run_id], number)
        args = ["--plan", str(self.tmp / f"plan-{number}" / "plan.json")] if plan else []
        return self.bot(
            "publish", "--results", str(results), "--ledger", str(self.ledger), *args, *extra,
            code=code,
        )  # fmt: skip

    def publish_whole(self, body: str, number: int, **kwargs) -> dict:
        """handle-event, the stage jobs and publish of a comment; handle-event's outputs."""
        outputs = self.handle_comment(body, number, **kwargs)
        assert outputs["run"] == "true", outputs
        digest = ["--artifact-digest", outputs["artifact_digest"]]
        self.publish(number, self.stage_jobs(outputs, number), *digest)
        return outputs

    def post_merge(self, number: int) -> str:
        """A whole push pipeline (handle-event, stage jobs, publish); publish's log."""
        outputs, _ = self.handle_push(number)
        results = self.stage_jobs(outputs, number)
        return self.publish(number, results, "--artifact-digest", outputs["artifact_digest"])
