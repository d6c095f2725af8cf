"""The `bot` CLI: help everywhere, user errors exit 2 without a traceback, a light start-up."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers.cli import bot

from stagebot.bot.cli.main import COMMANDS, main

SEED_COMMENT = '/bot run --stage-list "DGX_H200-4_GPUs-AutoDeploy-1"'


def ok(capsys, *args: str) -> str:
    try:
        main(list(args))
    except SystemExit as done:
        pytest.fail(f"bot {' '.join(args)} exited {done.code}: {capsys.readouterr()}")
    return capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_subcommand_has_help(capsys, name: str) -> None:
    code, out, _ = bot(capsys, name, "--help")
    assert code == 0 and out.startswith(f"Usage: bot {name} ")


def test_root_help_lists_every_subcommand(capsys) -> None:
    code, out, _ = bot(capsys, "--help")
    assert code == 0 and all(name in out for name in COMMANDS)


def test_parse_json(capsys) -> None:
    data = json.loads(ok(capsys, "parse", "--json", SEED_COMMENT))
    assert data["command"] == "run"
    assert data["options"]["stage_list"] == ["DGX_H200-4_GPUs-AutoDeploy-1"]


def test_parse_without_command_exits_0(capsys) -> None:
    assert json.loads(ok(capsys, "parse", "--json", "LGTM"))["command"] is None
    assert "no /bot command" in ok(capsys, "parse", "LGTM")


def test_parse_reads_stdin(capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO("hi\n/bot kill\n"))
    assert "command: kill (line 2)" in ok(capsys, "parse", "-")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["parse", "/bot run --fast"], "Error: unknown run flag '--fast'"),
        (
            ["dry-run", '/bot run --stage-list "Nope-1"'],
            "Error: --stage-list: unknown stage 'Nope-1'",
        ),
        (["dry-run", "--catalog", "/nonexistent", "/bot run"], "does not exist"),
        (["stages", "--stage", "A10-PyTorh-1"], "did you mean 'A10-PyTorch-1'"),
        (
            ["stages", "--list", "--stage", "x"],
            "give one of --list, --stage NAME, --test ID",
        ),
        (["stages", "--test", "nowhere/test_x.py"], "no stage runs 'nowhere/test_x.py'"),
        (["nonsense"], "unknown command 'nonsense'"),
    ],
)
def test_user_errors_exit_2_without_traceback(capsys, args: list[str], message: str) -> None:
    code, _, err = bot(capsys, *args)
    assert code == 2
    assert message in err
    assert "Traceback" not in err


def test_catalog_error_exits_2_and_names_the_file(capsys, tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("families:\n  - {name: A10-PyTorch, kind: test}\n")
    code, _, err = bot(capsys, "dry-run", "--catalog", str(bad), "/bot run")
    assert code == 2 and f"{bad}:2: family 'A10-PyTorch'" in err


def test_dry_run_table_and_json(capsys, tmp_path) -> None:
    changed = tmp_path / "changed.txt"
    changed.write_text("harness/suites/sharding_ir/hints.py\n")
    out = ok(capsys, "dry-run", "--changed-files", str(changed), "/bot run")
    assert "DGX_H200-4_GPUs-AutoDeploy-1" in out and "run_if_changed matched" in out
    assert "this run sets the PR's gating status" in out
    data = json.loads(
        ok(capsys, "dry-run", "--json", "--commit", "f" * 40, "--pr", "3", SEED_COMMENT)
    )
    assert [s["stage"] for s in data["shards"]] == ["DGX_H200-4_GPUs-AutoDeploy-1"]
    assert data["gating"] is False and data["pr"] == 3


def test_dry_run_extra_stage_example(capsys) -> None:
    out = ok(
        capsys,
        "dry-run",
        '/bot run --extra-stage "DGX_B200-4_GPUs-AutoDeploy-1, '
        'DGX_H100-4_GPUs-AutoDeploy-1" --disable-fail-fast',
    )
    explicit = [line.split()[0] for line in out.splitlines() if "(named explicitly)" in line]
    assert explicit == ["DGX_H100-4_GPUs-AutoDeploy-1", "DGX_B200-4_GPUs-AutoDeploy-1"]
    assert "CPU-PyTorch-1" in out


def test_dry_run_of_other_commands(capsys) -> None:
    assert "nothing to plan" in ok(capsys, "dry-run", "/bot kill")
    assert "no /bot command" in ok(capsys, "dry-run", "hello")


def test_stages_modes(capsys) -> None:
    listing = ok(capsys, "stages", "--list")
    assert listing.splitlines()[0].split()[:3] == ["STAGE", "KIND", "GPU"]
    assert "A100X-PackageSanityCheck-PY312-UB2404" in listing
    described = ok(capsys, "stages", "--stage", "DGX_H200-4_GPUs-AutoDeploy-1")
    assert "GPUs: 4 x DGX_H200" in described and "pytest harness/suites/sharding_ir" in described
    assert "reruns: a failed test up to 2x, when at most 5 failed" in described
    once = ok(
        capsys, "stages", "--catalog", "tests/fixtures/catalog", "--stage", "CPU-PyTorch-Once-1"
    )
    assert "reruns: none" in once
    mapped = ok(capsys, "stages", "--test", "harness/suites/nvfp4_moe/test_x.py::test_y")
    assert "CPU-PyTorch-1" in mapped and "DGX_H200-PyTorch-2" in mapped
    assert "AutoDeploy" not in mapped


def test_help_command(capsys) -> None:
    out = ok(capsys, "help")
    assert "/bot run [--sha SHA] [flags]" in out and "--stage-list" in out


@pytest.mark.parametrize("args", [["parse", "/bot run"], ["dry-run", "/bot run"]])
def test_fast_commands_import_nothing_heavy(args: list[str]) -> None:
    code = (
        "import sys; from stagebot.bot.cli.main import main\n"
        f"try: main({args!r})\nexcept SystemExit: pass\n"
        "print(sorted(m for m in ('torch', 'transformers', 'cutlass', 'github', 'jinja2') "
        "if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip().splitlines()[-1] == "[]"
