"""How the GitHub workflows install and run stagebot, read from the workflow files themselves.

A job "runs bot" when one of its ``run:`` steps calls ``bot <subcommand>``; its install lines are
the ``pip install`` lines of its ``run:`` steps, and, for the stage job, the lines its
`bot stage-setup` step runs for the entry (``stage_setup_lines``: the catalog's setup).
``fresh_venv`` makes a virtual environment and runs those lines in it exactly as written, with the
project (``.``) replaced by a built wheel.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BOT_CALL = re.compile(r"(?:^|[;&|(]|\bthen|\bdo)\s*bot\s+([a-z][a-z-]*)", re.MULTILINE)
PROJECT = re.compile(r"^\.(\[[\w,\s-]+\])?$")  # `.` or `.[extra,...]`


@dataclass(frozen=True)
class BotJob:
    workflow: str
    job: str
    installs: tuple[str, ...]  # the job's `pip install` lines, in order
    commands: tuple[str, ...]  # the bot subcommands it runs
    install_steps: tuple[str, ...] = ()  # the whole `run:` scripts that hold those lines


def bot_jobs(folder: Path = ROOT / ".github" / "workflows") -> list[BotJob]:
    """Every job of every workflow under ``folder`` that runs `bot`."""
    jobs = []
    for path in sorted([*folder.glob("*.yml"), *folder.glob("*.yaml")]):
        workflow = yaml.safe_load(path.read_text()) or {}
        for name, job in (workflow.get("jobs") or {}).items():
            scripts = [step["run"] for step in job.get("steps") or [] if "run" in step]
            commands = tuple(c for script in scripts for c in BOT_CALL.findall(script))
            if not commands:
                continue
            installs = tuple(
                line.strip()
                for script in scripts
                for line in script.splitlines()
                if re.search(r"\bpip\s+install\b", line)
            )
            steps = tuple(s for s in scripts if re.search(r"\bpip\s+install\b", s))
            jobs.append(BotJob(path.name, name, installs, commands, steps))
    return jobs


PRIVILEGED = ("bot.yml", "report.yml")  # the plan and report jobs: the App key, statuses write
HASHED_PIN = re.compile(
    r"^[A-Za-z0-9._-]+==\S+ \\\n(?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+", re.M
)


def unhashed_fetches(line: str, root: Path) -> list[str]:
    """What the ``pip install`` ``line`` could fetch without checking a hash: a named
    requirement, a requirements file that is not hashed throughout (pip checks hashes only in
    hash-checking mode: ``--require-hashes``, or a file whose pins all carry hashes), the
    project's dependencies (no ``--no-deps``) or its build requirements (an isolated build
    fetches ``[build-system] requires`` itself, never hash-checked). ``-r`` files are read
    under ``root``; one named by a shell variable counts only with ``--require-hashes``."""
    words = shlex.split(line)
    args = words[words.index("install") + 1 :]
    hashed_mode = "--require-hashes" in args
    found = []
    i = 0
    while i < len(args):
        word = args[i]
        if word in ("-r", "--requirement", "-c", "--constraint"):
            path = args[i + 1]
            i += 2
            if word in ("-c", "--constraint") or hashed_mode:
                continue
            lock = root / path
            if "$" in path or not lock.is_file() or not _hashed_throughout(lock):
                found.append(f"-r {path} is not hash-checked (add --require-hashes)")
            continue
        i += 1
        if word.startswith("-"):
            continue
        if PROJECT.match(word) or word.startswith(("/", "./")):
            if "--no-deps" not in args:
                found.append(f"{word}'s dependencies (add --no-deps after a hashed lock)")
            if PROJECT.match(word) and "--no-build-isolation" not in args:
                found.append(
                    f"{word}'s build requirements, which an isolated build fetches unhashed "
                    "(install a hashed build lock, then --no-build-isolation)"
                )
        elif not hashed_mode:
            found.append(f"{word}, named without a hash")
    return found


def _hashed_throughout(lock: Path) -> bool:
    """Every requirement of ``lock`` is pinned with ``==`` and carries a sha256 hash."""
    text = lock.read_text(encoding="utf-8")
    requirements = [
        line
        for line in HASHED_PIN.sub("", text).splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    return bool(HASHED_PIN.search(text)) and not requirements


def source_copy(into: Path) -> Path:
    """The tracked files only: a build/ folder left by an earlier in-tree build would leak into
    the wheel and hide what the packaging itself includes."""
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, tracked.split("\0")):
        source = ROOT / name
        if source.is_file():
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return into


def build_wheel(source: Path, into: Path) -> Path:
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(into), "."],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = into.glob("stagebot-*.whl")
    return wheel


def extras_requiring(wheel: Path, package: str) -> set[str]:
    """The wheel's extras that pull ``package`` in (from its METADATA)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode()
    pattern = rf"^Requires-Dist: {package}\b.*extra == \"([\w-]+)\""
    return set(re.findall(pattern, metadata, flags=re.MULTILINE))


def with_wheel(line: str, wheel: Path) -> tuple[str, set[str]]:
    """The install line with the project (``.`` / ``.[x,y]``) replaced by ``wheel``, and the
    extras it names (a line that installs a lock only is kept as it is)."""
    words, extras = [], set()
    for word in shlex.split(line):
        found = PROJECT.match(word)
        if found:
            named = found[1] or ""
            extras |= {e.strip() for e in named.strip("[]").split(",") if e.strip()}
            word = f"{wheel}{named}"
        words.append(word)
    return shlex.join(words), extras


def venv_env(venv: Path) -> dict[str, str]:
    """The environment of a job in ``venv``: its bin first on PATH, nothing of ours leaking in."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTEST_ADDOPTS")
        and not k.startswith("GITHUB_")
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    return env


def fresh_venv(venv: Path, installs: tuple[str, ...], wheel: Path) -> dict[str, str]:
    """A new virtual environment with the job's install lines run in it (``python`` is the
    venv's); returns its environment."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = venv_env(venv)
    run_installs(installs, wheel, env)
    return env


def stage_setup_lines(entry: dict, env: dict[str, str]) -> tuple[str, ...]:
    """The install lines `bot stage-setup` runs for ``entry`` (its ``--print``), from the bot
    installed in ``env``: what the stage job installs besides its own lines."""
    done = subprocess.run(
        ["bot", "stage-setup", "--print", "--entry", json.dumps(entry)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = tuple(done.stdout.splitlines())
    assert not [line for line in lines if line.startswith("export ")], "no env expected here"
    return lines


def run_installs(installs: tuple[str, ...], wheel: Path, env: dict[str, str]) -> None:
    """Run install lines in ``env`` with the project (``.``) replaced by ``wheel``. torch, when
    an installed extra needs it, goes in first at the version this interpreter has: the CPU
    build on this machine's disk, as DEVELOPERS.md says (the workflow on GitHub takes PyPI's)."""
    lines = [with_wheel(line, wheel) for line in installs]
    assert any(str(wheel) in line for line, _ in lines), f"no `.` to install in {installs}"
    if any(extras & extras_requiring(wheel, "torch") for _, extras in lines):
        from importlib.metadata import version

        _sh(f"python -m pip install --quiet torch=={version('torch')}", env)
    for line, _ in lines:
        _sh(line, env)


def run_step(script: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """A ``run:`` step as GitHub runs it (its default shell on Linux): the first failing line
    fails the step."""
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _sh(line: str, env: dict[str, str]) -> None:
    done = run_step(line, env)
    assert done.returncode == 0, f"$ {line}\n{done.stdout}{done.stderr}"


def installed_venv(venv: Path, job: BotJob, runner_temp: Path) -> dict[str, str]:
    """A new virtual environment with the job's install steps run in it exactly as the workflow
    writes them (whole scripts, ``$RUNNER_TEMP`` set): for workflows that pin a stagebot release
    by path and hash rather than installing the checkout."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = venv_env(venv)
    runner_temp.mkdir(parents=True, exist_ok=True)
    for script in job.install_steps:
        _sh(script, {**env, "RUNNER_TEMP": str(runner_temp)})
    return env
