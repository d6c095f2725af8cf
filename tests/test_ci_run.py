"""CI builds what a newcomer builds (.ci/run): the README's test command, read from the README,
in a fresh virtual environment; then the newest versions the extras allow, naming each release
that differs from the lock."""

from __future__ import annotations

import subprocess
import sys

from workflow_installs import ROOT

from stagebot.harness.reuse.dependency_key import current_environment

CI = ROOT / ".ci"


def _ci_script(name: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(CI / name), *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_ci_runs_the_readmes_test_command_in_a_fresh_virtual_environment() -> None:
    parsed = subprocess.run(["bash", "-n", str(CI / "run")], capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr
    command = _ci_script("readme_command.py", "test").strip()
    assert f"```bash\n{command}\n```" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert "pip install -r templates/locks/dev.txt" in command and "python3 -m pytest" in command
    script = (CI / "run").read_text(encoding="utf-8")
    job = script.split("== job 1", 1)[1].split("== job 2", 1)[0]
    assert "readme_test_command=$(python3 .ci/readme_command.py test)" in script
    assert '(source "$(fresh_venv)/bin/activate" && eval "$readme_test_command")' in job


def test_the_newest_job_names_each_release_the_lock_does_not_have(tmp_path) -> None:
    """Against a lock that pins two installed distributions at other versions."""
    installed = dict(current_environment().distributions)
    lock = tmp_path / "lock.txt"
    lock.write_text(
        "jinja2==0.0.1 \\\n    --hash=sha256:00\n"
        f"click=={installed['click']} \\\n    --hash=sha256:00\n"
        "pyyaml==0.0.2 \\\n    --hash=sha256:00\n"
    )
    assert _ci_script("newer_than_lock.py", str(lock)).splitlines() == [
        f"jinja2 {installed['jinja2']} (lock: 0.0.1)",
        f"pyyaml {installed['pyyaml']} (lock: 0.0.2)",
    ]
