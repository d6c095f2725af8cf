"""Installed distributions made by hand: a folder that, put on PYTHONPATH, holds what pip would
have left there (a ``.dist-info`` folder, and a top-level package when asked for), so that a
run sees one more distribution (importlib.metadata) or module (the import system)."""

from __future__ import annotations

from pathlib import Path


def install_distribution(site: Path, name: str, version: str = "0.0.1", *, package=False) -> Path:
    """Install ``name`` into ``site``; with ``package``, a package ``name`` whose ``__init__``
    sets ``THROWAWAY = True``. Returns ``site``."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "INSTALLER").write_text("tests\n")
    record = [f"{info.name}/METADATA,,", f"{info.name}/INSTALLER,,"]
    if package:
        (site / name).mkdir()
        (site / name / "__init__.py").write_text("THROWAWAY = True\n")
        record.append(f"{name}/__init__.py,,")
    (info / "RECORD").write_text("\n".join(record) + "\n")
    return site
