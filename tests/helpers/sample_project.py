"""A realistic repository to adopt, built fresh in a temporary folder and committed: what a new
user's project looks like, not the tidy tests/fixtures/sample_repo.

- a ``src/`` layout: package ``gridkit`` with two subpackages, ``core`` and ``ops``;
- tests in two areas, ``tests/core`` and ``tests/ops``, each with ``@pytest.mark.gpu`` tests; the
  GPU tests of ``ops`` import torch (only the ``gpu`` extra installs it: ``torch=False`` builds a
  repository that uses no PyTorch at all);
- ``tests/conftest.py`` with a fixture that reads a data file through a symlink
  (``tests/data/table.csv`` -> ``data/table.csv``);
- a ``-p tools.pytest_stamp`` plug-in in ``addopts``, from the ``tools/`` package;
- a test that imports ``hypothesis``, listed in ``tests/requirements.txt`` (not in any extra);
- a vendored folder (``third_party/minijson``, with tests of its own that are no area);
- a git submodule (``extern/shapes``) whose file a core test reads;
- a committed ``.so`` file and a ``.gitattributes`` that sends ``*.npz`` through Git LFS.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from helpers.cli import bot_process

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Ada",
    "GIT_AUTHOR_EMAIL": "ada@example.com",
    "GIT_COMMITTER_NAME": "Ada",
    "GIT_COMMITTER_EMAIL": "ada@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
}

PYPROJECT = """\
[project]
name = "gridkit"
version = "0.3.0"
requires-python = ">=3.11"
dependencies = []

[project.optional-dependencies]
test = ["pytest>=8"]
gpu = [{torch}]

[build-system]
requires = ["setuptools>=70.1"]
build-backend = "setuptools.build_meta"

[tool.setuptools.packages.find]
where = ["src"]

[tool.pytest.ini_options]
testpaths = ["tests"]
pythonpath = ["src", "."]
addopts = "-p tools.pytest_stamp"
markers = ["gpu: needs a CUDA GPU"]
"""

FILES = {
    "README.md": "# gridkit\n\nGrids and the operations on them.\n",
    ".gitignore": "out/\n*.egg-info/\n__pycache__/\n",
    ".gitattributes": "*.npz filter=lfs diff=lfs merge=lfs -text\n",
    "src/gridkit/__init__.py": '"""Grids."""\n',
    "src/gridkit/core/__init__.py": "from gridkit.core.grid import Grid\n\n__all__ = ['Grid']\n",
    "src/gridkit/core/grid.py": (
        "class Grid:\n"
        "    def __init__(self, rows):\n"
        "        self.rows = [list(r) for r in rows]\n\n"
        "    def total(self):\n"
        "        return sum(sum(r) for r in self.rows)\n"
    ),
    "src/gridkit/ops/__init__.py": "",
    "src/gridkit/ops/scale.py": (
        "from gridkit.core import Grid\n\n\n"
        "def scale(grid, k):\n"
        "    return Grid([[k * v for v in r] for r in grid.rows])\n"
    ),
    "src/gridkit/_native.so": None,  # bytes, below
    "tools/__init__.py": "",
    "tools/pytest_stamp.py": (
        '"""The project\'s own plug-in (`-p tools.pytest_stamp` in addopts)."""\n\n\n'
        "def pytest_report_header(config):\n"
        '    return "gridkit stamp plug-in"\n'
    ),
    "data/table.csv": "a,b\n1,2\n3,4\n",
    "data/weights.npz": None,
    "third_party/minijson/__init__.py": "def dumps(x):\n    return repr(x)\n",
    "third_party/minijson/tests/test_minijson.py": (
        "from third_party.minijson import dumps\n\n\ndef test_dumps():\n"
        "    assert dumps(1) == '1'\n"
    ),
    "tests/conftest.py": (
        "from pathlib import Path\n\nimport pytest\n\n\n"
        "@pytest.fixture\n"
        "def table():\n"
        '    lines = (Path(__file__).parent / "data" / "table.csv").read_text().split()\n'
        '    return [[int(v) for v in line.split(",")] for line in lines[1:]]\n'
    ),
    "tests/core/test_grid.py": (
        "from pathlib import Path\n\nimport pytest\n\nfrom gridkit.core import Grid\n\n\n"
        "def test_total(table):\n"
        "    assert Grid(table).total() == 10\n\n\n"
        "def test_shapes_from_the_submodule():\n"
        "    root = Path(__file__).resolve().parents[2]\n"
        '    assert (root / "extern" / "shapes" / "shapes.txt").read_text().startswith("square")\n'
        "\n\n@pytest.mark.gpu\n"
        "def test_total_on_device(table):\n"
        '    pytest.skip("no GPU here")\n'
    ),
    "tests/core/test_props.py": (
        "from hypothesis import given, strategies as st\n\nfrom gridkit.core import Grid\n\n\n"
        "@given(st.lists(st.integers(-9, 9), min_size=1, max_size=4))\n"
        "def test_total_of_one_row(row):\n"
        "    assert Grid([row]).total() == sum(row)\n"
    ),
    "tests/ops/test_scale.py": (
        "import pytest\n\nfrom gridkit.core import Grid\nfrom gridkit.ops.scale import scale\n\n\n"
        "def test_scale(table):\n"
        "    assert scale(Grid(table), 2).total() == 20\n"
    ),
}

GPU_TEST_TORCH = (
    "import pytest\nimport torch\n\nfrom gridkit.core import Grid\n\n\n"
    "@pytest.mark.gpu\n"
    "def test_scale_on_device(table):\n"
    "    device = torch.device('cuda')\n"
    "    assert torch.tensor(Grid(table).rows, device=device).sum().item() == 10\n"
)
GPU_TEST_PLAIN = (
    "import pytest\n\nfrom gridkit.core import Grid\n\n\n"
    "@pytest.mark.gpu\n"
    "def test_scale_on_device(table):\n"
    "    assert Grid(table).total() == 10\n"
)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "protocol.file.allow=always", *args],
        cwd=cwd,
        env={**os.environ, **GIT_ENV},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout


def build_sample(folder: Path, *, torch: bool = True) -> Path:
    """The repository, committed on ``main`` with its submodule; returns its root."""
    shapes = folder / "shapes-upstream"
    shapes.mkdir(parents=True)
    (shapes / "shapes.txt").write_text("square\ncircle\n")
    git(shapes, "init", "-q", "-b", "main")
    git(shapes, "add", ".")
    git(shapes, "commit", "-q", "-m", "shapes")

    repo = folder / "gridkit"
    repo.mkdir()
    (repo / "pyproject.toml").write_text(PYPROJECT.format(torch='"torch>=2.4"' if torch else ""))
    for path, text in FILES.items():
        target = repo / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            target.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(64)))
        else:
            target.write_text(text)
    (repo / "tests/ops/test_scale_gpu.py").write_text(GPU_TEST_TORCH if torch else GPU_TEST_PLAIN)
    (repo / "tests/requirements.txt").write_text("hypothesis>=6\n")
    (repo / "tests/data").mkdir()
    (repo / "tests/data/table.csv").symlink_to(Path("../../data/table.csv"))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "submodule", "add", "-q", str(shapes), "extern/shapes")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "gridkit")
    return repo


def bot(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`bot ARGS…` in a fresh process started in ``cwd`` (a new user's shell)."""
    return bot_process(*args, cwd=cwd, env=env)


def adopted_sample(folder: Path, *, torch: bool = True) -> Path:
    """The sample after `bot init --write` (a stand-in release wheel: init only hashes it),
    with `.github` committed, as docs/adopt.md step 4 leaves it."""
    repo = build_sample(folder, torch=torch)
    wheel = folder / "dist" / "stagebot-0.1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"stand-in wheel bytes")
    done = bot(repo, "init", "--stagebot-wheel", str(wheel), "--write")
    assert done.returncode == 0, done.stdout + done.stderr
    git(repo, "add", ".github")
    git(repo, "commit", "-q", "-m", "Adopt stagebot")
    return repo
