"""A committed git repository holding the fixture catalog (tests/fixtures/catalog) as
``catalog.yaml``, the files a test names and an empty ``sub/`` folder to run from."""

from __future__ import annotations

import subprocess
from pathlib import Path

from fixtures.botrun import CATALOG


def committed_catalog_repo(repo: Path, files: dict[str, str]) -> Path:
    """``repo`` made and committed with the catalog and ``files`` (path -> text)."""
    (repo / "sub").mkdir(parents=True)
    (repo / "catalog.yaml").write_text((CATALOG / "stages.yaml").read_text())
    for path, text in files.items():
        (repo / path).write_text(text)
    for args in (("init", "-q"), ("add", ".")):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"],
        cwd=repo,
        check=True,
        capture_output=True,
    )
    return repo
