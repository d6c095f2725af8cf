"""The README's family table against the registry: entry lines, shared values and blocks are
recomputed (``family_table.py``), so the table cannot go stale."""

from __future__ import annotations

from pathlib import Path

import pytest

from stagebot.harness.suites.sharding_ir.family_table import COLUMNS, entry_lines, rows

README = Path(__file__).with_name("README.md")


def _table(text: str) -> list[tuple[str, ...]]:
    """The cells of the table under ``## Families`` whose header starts with COLUMNS."""
    section = text[text.index("## Families\n") :]
    lines = iter(section.splitlines())
    header = "| " + " | ".join(COLUMNS) + " |"
    for line in lines:
        if line.startswith(header):
            break
    else:
        raise AssertionError(f"no table headed {header!r} under '## Families' in {README}")
    next(lines)  # the |---| line
    cells = []
    for line in lines:
        if not line.startswith("|"):
            break
        cells.append(tuple(c.strip() for c in line.strip("|").split(" | ")))
    return cells


def test_the_readme_table_is_the_registry():
    table = [row[: len(COLUMNS)] for row in _table(README.read_text())]
    expected = rows()
    printed = "\n".join("| " + " | ".join(row) + " |" for row in expected)
    assert table == expected, f"README's family table is stale; its computed columns:\n{printed}"


def test_a_stale_count_is_caught():
    """The comparison reads the README's numbers: one entry's line count off by one fails."""
    text = README.read_text()
    first = rows()[0]
    stale_row = "| " + " | ".join((*first[:2], str(int(first[2]) + 1), *first[3:]))
    stale = text.replace("| " + " | ".join(first), stale_row, 1)
    assert stale != text
    assert [r[: len(COLUMNS)] for r in _table(stale)] != rows()


def test_entry_lines_are_the_entries_as_formatted():
    """Llama's entry, counted by hand: ``ModelSpec(`` to its ``)``, 10 lines, sharing ``_BIAS``."""
    assert entry_lines()["meta-llama/Llama-3.1-8B"] == (10, [("_BIAS", 1)])


@pytest.mark.parametrize("model_id", ["mistralai/Mixtral-8x7B-v0.1", "Qwen/Qwen3-30B-A3B"])
def test_the_dense_mlp_is_listed_only_where_a_layer_keeps_it(model_id):
    """Mixtral's layers are all sparse; Qwen3-MoE keeps layer 0 dense (``mlp_only_layers``)."""
    cells = dict((row[0], row[4]) for row in rows())
    assert ("`gated_mlp`" in cells[f"`{model_id}`"]) == (model_id == "Qwen/Qwen3-30B-A3B")
