"""The README's family table, computed: per registered family its model id, HF class, the lines of
its entry in ``registry.py`` as formatted, the module-level values of ``registry.py`` it shares
with others (and their lines), and the blocks its IR builds. ``test_family_table.py`` compares the
README with it; ``python -m stagebot.harness.suites.sharding_ir.family_table`` prints the cells.
"""

from __future__ import annotations

import ast
from pathlib import Path

from stagebot.harness.suites.sharding_ir import registry

COMMON = "TINY"  # the tiny sizes every entry starts from: not listed per family
COLUMNS = ("model id", "HF class", "entry lines", "shared values (lines)", "blocks")


def _entries(tree: ast.Module) -> tuple[list[ast.Call], dict[str, int]]:
    """The ``ModelSpec(...)`` calls of ``FAMILIES``, and each other module-level value's lines."""
    values, calls = {}, []
    for node in tree.body:
        target = getattr(node, "target", None) or (getattr(node, "targets", None) or [None])[0]
        name = getattr(target, "id", None)
        if name == "FAMILIES":
            calls = list(node.value.elts)
        elif name is not None and isinstance(node, ast.Assign | ast.AnnAssign):
            values[name] = node.end_lineno - node.lineno + 1
    return calls, values


def _model_id(call: ast.Call) -> str:
    return next(k.value.value for k in call.keywords if k.arg == "model_id")


def entry_lines() -> dict[str, tuple[int, list[tuple[str, int]]]]:
    """Model id -> (its entry's lines, the shared module-level values it names with their lines)."""
    tree = ast.parse(Path(registry.__file__).read_text())
    calls, values = _entries(tree)
    out = {}
    for call in calls:
        found = sorted(
            (n.lineno, n.col_offset, n.id) for n in ast.walk(call) if isinstance(n, ast.Name)
        )
        names = dict.fromkeys(name for *_, name in found)  # in source order
        shared = [(n, values[n]) for n in names if n in values and n != COMMON]
        out[_model_id(call)] = (call.end_lineno - call.lineno + 1, shared)
    return out


def blocks_built(spec: registry.ModelSpec) -> list[str]:
    """The blocks the family's tiny IR builds: its layer, attention and norm, its sparse block,
    and the dense MLP where some layer keeps it."""
    from stagebot.harness.suites.sharding_ir import blocks

    a = spec.arch.resolve(spec.config(), spec.model_id)
    used = [a.layer.name, a.attention.name, a.norm.name]
    if a.moe is not None:
        used.append(a.moe.name)
    if a.moe is None or any(blocks.build("ffn", a.moe, a, i) is None for i in range(a.num_layers)):
        used.append(a.mlp.name)
    return used


def rows() -> list[tuple[str, ...]]:
    """The table's computed cells, one row per registered family, in the registry's order."""
    lines = entry_lines()
    out = []
    for model_id, spec in registry.REGISTRY.items():
        n, shared = lines[model_id]
        values = ", ".join(f"`{name}` ({count})" for name, count in shared) or "-"
        used = ", ".join(f"`{b}`" for b in blocks_built(spec))
        out.append((f"`{model_id}`", f"`{spec.hf_class}`", str(n), values, used))
    return out


if __name__ == "__main__":
    for row in rows():
        print("| " + " | ".join(row) + " |")
