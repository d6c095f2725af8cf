"""stagebot's code folders never shadow installed distributions of their bare names.

A throwaway distribution named like each code folder (``bot``, ``stages``, ``harness``, ``kernels``,
``templates``) is installed on the pytest's path; the harness suites then run the ways stagebot
starts them (a shard's ``python -m pytest`` from the repository root, the test command's xdist
workers, a built-in suite run from another repository in pytest's ``prepend`` mode), and a probe
plug-in (tests/fixtures/shadow_probe) records, at the session's end, what each bare name imports
there and in a forkserver it starts as the sharding suite starts its own, and which bare names
pytest registered for stagebot's files. An adopting repository's own folder of one of those
names still imports as its pytest would import it.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.distributions import install_distribution

from stagebot.harness.run import own_names

ROOT = Path(__file__).resolve().parents[3]
SUITE_FILES = (  # light files of both suites, conftests included
    "harness/suites/sharding_ir/test_dist_config.py",
    "harness/suites/nvfp4_moe/test_nvfp4_format.py",
)
PROBE = ROOT / "tests" / "fixtures" / "shadow_probe"  # the probe plug-in


@pytest.fixture(scope="module")
def throwaway_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding one installed distribution per code folder's name."""
    site = tmp_path_factory.mktemp("site")
    for name in own_names.CODE_FOLDERS:
        install_distribution(site, name, package=True)
    return site


def _run_probed(site: Path, cwd: Path, args: list[str], out: Path) -> list[dict]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(PROBE)]),
        "PROBE_NAMES": json.dumps(own_names.CODE_FOLDERS),
        "PROBE_OURS": str(own_names.PACKAGE_ROOT),
        "PROBE_OUT": str(out),
    }
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "shadow_probe", *args]
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return [json.loads(line) for line in out.read_text().splitlines()]


def _assert_installed_ones_win(site: Path, records: list[dict]) -> None:
    assert records, "the probe never ran"
    for record in records:
        for process, imported in record["imported"].items():
            for name, file in imported.items():
                wanted = str(site / name / "__init__.py")
                assert file == wanted, f"{process}: `import {name}` gave {file}"
        assert record["registered_bare"] == [], "stagebot's files registered by bare names"


@pytest.mark.slow
@pytest.mark.parametrize(
    "how",
    [
        pytest.param(["-q"], id="shard-from-the-root"),
        pytest.param(["-q", "-n", "2"], id="xdist-workers"),
    ],
)
def test_the_suites_run_from_the_root_import_the_installed_bare_names(
    throwaway_site: Path, tmp_path: Path, how: list[str]
):
    records = _run_probed(throwaway_site, ROOT, [*how, *SUITE_FILES], tmp_path / "probe.jsonl")
    _assert_installed_ones_win(throwaway_site, records)


@pytest.mark.slow
def test_a_builtin_suite_run_from_another_repository_in_prepend_mode(
    throwaway_site: Path, tmp_path: Path
):
    elsewhere = tmp_path / "adopter"
    elsewhere.mkdir()
    args = ["-q", "--import-mode=prepend", "--rootdir", str(own_names.PACKAGE_ROOT)]
    suite_files = [str(own_names.PACKAGE_ROOT / path) for path in SUITE_FILES]
    records = _run_probed(throwaway_site, elsewhere, [*args, *suite_files], tmp_path / "p.jsonl")
    _assert_installed_ones_win(throwaway_site, records)


def test_an_adopting_repositorys_own_folder_of_such_a_name_still_imports(tmp_path: Path):
    """Its root goes on sys.path where its own pytest puts it (prepend mode: the first folder
    above the test's package chain), and its `kernels` is its own."""
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "__init__.py").write_text("MINE = True\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "tests" / "test_mine.py").write_text(
        "import kernels\n\ndef test_mine():\n    assert kernels.MINE\n"
    )
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]


def test_the_package_root_leaves_sys_path_in_every_spelling(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(own_names.PACKAGE_ROOT)
    path = ["", str(own_names.PACKAGE_ROOT), str(own_names.PACKAGE_ROOT / "tests"), ".", "/x"]
    assert own_names.drop_package_root(path) == ["", str(own_names.PACKAGE_ROOT), "."]
    assert path == [str(own_names.PACKAGE_ROOT / "tests"), "/x"]
    monkeypatch.chdir(tmp_path)
    assert own_names.drop_package_root(["", "."]) == []


def test_canonical_names_cover_the_code_folders_only():
    root = own_names.PACKAGE_ROOT
    assert own_names.canonical_name(root / "harness/suites/sharding_ir/conftest.py") == (
        "stagebot.harness.suites.sharding_ir.conftest"
    )
    assert own_names.canonical_name(root / "kernels/__init__.py") == "stagebot.kernels"
    assert own_names.canonical_name(root / "tests/test_cli.py") is None
    assert own_names.canonical_name(root / "harness/schemas/stage_result.v1.json") is None
    assert own_names.canonical_name(Path("/elsewhere/bot/cli.py")) is None


def test_the_code_folders_are_setup_pys():
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    assigned = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Tuple)
    }
    assert assigned["CODE_FOLDERS"] == own_names.CODE_FOLDERS
