"""The workflow jobs as the generated workflows install them: each `bot` call made by the `bot`
of the fresh virtual environment of the job that runs that subcommand (tests/workflow_installs.py
builds them from the workflows' install lines)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from workflow_installs import run_installs, stage_setup_lines

from helpers.workflow_jobs import Jobs


def installed_bot(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bot", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


class InstalledJobs(Jobs):
    """The workflow jobs, each `bot` call made by the installed `bot` of the workflow job that
    runs that subcommand, and `bot run-stage` by the stage job's Python, after the stage job has
    installed what each entry's setup says."""

    def __init__(self, by_command: dict[str, dict[str, str]], wheel: Path, *args) -> None:
        super().__init__(*args)
        self.by_command, self.wheel = by_command, wheel
        # The fixture suite needs pytest: the catalog says so, as stagebot's own does.
        self.catalog.write_text("setup: {extras: [harness]}\n" + self.catalog.read_text())
        self.python = str(Path(self.environment("run-stage")["VIRTUAL_ENV"]) / "bin" / "python")

    def environment(self, command: str) -> dict[str, str]:
        assert command in self.by_command, f"no workflow job runs `bot {command}`"
        github = {k: v for k, v in os.environ.items() if k.startswith(("GITHUB_", "STAGEBOT_"))}
        return {**self.by_command[command], **github}

    def bot(self, *args: str, code: int = 0) -> str:
        done = installed_bot(self.environment(args[0]), Path.cwd(), *args)
        assert done.returncode == code, f"`bot {args[0]}`: {done.stdout}{done.stderr}"
        return done.stdout + done.stderr

    def stages(self, outputs: dict, conclusion: str = "success") -> int:
        env = self.environment("stage-setup")
        for entry in json.loads(outputs["matrix"]):
            run_installs(stage_setup_lines(entry, env), self.wheel, env)
        return super().stages(outputs, conclusion)
