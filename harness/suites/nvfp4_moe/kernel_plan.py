"""The cute kernels each case of the suite compiles, computed from the case list without a GPU,
and their committed copy (cute_kernels.json), which a fresh machine's warm step reads.

The cases' own records (kernel_manifest) live in the cache folder, so a machine whose folder is
empty compiled every kernel one by one as the cases reached them (about 270 s of a 300 s stage
on the H200). But what a case asks for follows from its parameters: the GEMMs its test calls
(GEMMS, one entry per test function of a dispatched op), its case's shapes and the tactic it is
pinned to by its id. ``bot kernels record`` collects the suite as DGX_H200-PyTorch runs it
(``--moe-backend cute``) and writes every case's keys to cute_kernels.json; ``--check`` and a CPU
test recompute them and fail when the committed file is stale (a case, a shape or the tactic
list changed). It is data, not build output: keys, no compiled code.

The suite's warm step (conftest) compiles, while the cases run, each selected case's keys from
its record in the cache folder or, where it has none, from here; the latter only on a machine
with an sm_90 GPU, the only kind that can store what it compiles. Each case's record then checks
this plan on the GPU: the session's summary counts the cases that asked for a key it lacks.
"""

from __future__ import annotations

import contextlib
import io
import json
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from stagebot.harness.suites.nvfp4_moe.cases import GPU, Case, one_case
from stagebot.kernels.cute import compile as cute_compile
from stagebot.kernels.cute import tactics
from stagebot.kernels.cute.compile import CompileKey
from stagebot.kernels.cute.launch import ARCH

SUITE_DIR = Path(__file__).resolve().parent
ROOT = SUITE_DIR.parents[2]  # the checkout: pytest's rootdir when a stage runs the suite
PLAN_FILE = SUITE_DIR / "cute_kernels.json"
# How the stage that compiles these kernels runs the suite (stages/catalog/suite_nvfp4_moe.yaml).
SUITE_ARGS = ("--moe-backend", "cute")
RECORD_COMMAND = "bot kernels record"


class PlanError(Exception):
    """The suite cannot be planned: a dispatched-op test without GEMMS, or its collection
    failed."""


@dataclass(frozen=True)
class Gemm:
    """One GEMM a test calls: its kernel, which layer weights it multiplies ("w1": n = 2 x
    intermediate, k = hidden; "w2": n = hidden, k = intermediate) and whether the call passes
    tile_idx_to_mn_limit. The finalize kernel's key also holds the case's top_k."""

    kernel: str
    weights: str
    limits: bool


SWIGLU = Gemm("grouped_gemm_swiglu", "w1", limits=True)
ROWS = Gemm("grouped_gemm", "w2", limits=False)  # the grouped_gemm op's tests
UNFUSED_ROWS = Gemm("grouped_gemm", "w2", limits=True)  # fused_moe with the finalize unfused
F32_ROWS = Gemm("grouped_gemm_f32_rows", "w2", limits=True)  # the deterministic finalize
FINALIZE = Gemm("grouped_gemm_finalize", "w2", limits=True)


def _finalize(params: dict) -> list[Gemm]:
    return [F32_ROWS if params["deterministic"] else FINALIZE]


def _fused(params: dict) -> list[Gemm]:
    return [SWIGLU, UNFUSED_ROWS if params.get("finalize", "").startswith("un") else FINALIZE]


# The case the controls and the no-local-pairs tests run at on the GPU (control_scale is the
# GPU's under a cuda-only backend; _no_local_case is one_case's defaults).
CONTROL = one_case(GPU)
# test function -> (its case when it takes no ``case`` parameter, its GEMMs from its parameters)
GEMMS: dict[str, tuple[Case | None, Callable[[dict], list[Gemm]]]] = {
    "test_grouped_gemm_matches_the_oracle": (None, lambda p: [ROWS]),
    "test_grouped_gemm_negative_control_fails": (CONTROL, lambda p: [ROWS]),
    "test_grouped_gemm_without_local_pairs": (CONTROL, lambda p: [ROWS]),
    "test_grouped_gemm_swiglu_matches_the_oracle": (None, lambda p: [SWIGLU]),
    "test_grouped_gemm_swiglu_negative_control_fails": (CONTROL, lambda p: [SWIGLU]),
    "test_grouped_gemm_swiglu_alpha_one_percent_off_fails": (CONTROL, lambda p: [SWIGLU]),
    "test_grouped_gemm_swiglu_without_local_pairs": (CONTROL, lambda p: [SWIGLU]),
    "test_grouped_gemm_finalize_matches_the_oracle": (None, _finalize),
    "test_grouped_gemm_finalize_negative_control_fails": (
        one_case(GPU, top_k=2),
        lambda p: [F32_ROWS, FINALIZE],
    ),
    "test_grouped_gemm_finalize_without_local_pairs_is_zero": (CONTROL, _finalize),
    "test_fused_moe_matches_the_oracle": (None, _fused),
    "test_fused_moe_negative_control_fails": (CONTROL, _fused),
    "test_fused_moe_down_projection_alpha_one_percent_off_fails": (one_case(GPU, top_k=1), _fused),
    "test_fused_moe_without_local_pairs_is_zero": (CONTROL, _fused),
}


def pinned_tactic(nodeid: str) -> tactics.Tactic:
    """The tactic a dispatched-op case runs with unless --cute-tactic pins one: by its id's
    hash, so every tactic runs across the suite and a case keeps its tactic in any shard."""
    return tactics.TACTICS[zlib.crc32(nodeid.encode()) % len(tactics.TACTICS)]


def with_tactic(keys: Iterable[CompileKey], pinned: tactics.Tactic) -> Iterator[CompileKey]:
    """``keys`` as a case pinned to ``pinned`` asks for them (sparse_rows is dense without the
    tile limits), leaving out those the tactic cannot take (the case fails instead)."""
    for key in keys:
        tactic = tactics.effective(pinned, key.mn_limit)
        ok, _ = cute_compile.kernel_class(tactic).can_implement(
            tactic, key.n, key.k, key.tile_size, cute_compile.KERNEL_EPILOGUE[key.kernel]
        )
        if ok:
            yield replace(key, tactic=tactic)


def case_id(item: pytest.Item) -> str | None:
    """The item's id with its file relative to the suite (whatever pytest's rootdir), or None
    for an item outside the suite."""
    path = Path(item.path).resolve()
    if not path.is_relative_to(SUITE_DIR):
        return None
    return path.relative_to(SUITE_DIR).as_posix() + item.nodeid[item.nodeid.find("::") :]


def item_keys(item: pytest.Item) -> list[CompileKey]:
    """The keys a dispatched-op item of the suite asks for; [] for other items."""
    if item.get_closest_marker("moe_op") is None:
        return []
    name = getattr(item, "originalname", item.name)
    if name not in GEMMS:
        raise PlanError(
            f"{item.nodeid}: kernel_plan.GEMMS has no entry for {name}, a test of a dispatched "
            f"op; add the GEMMs it calls, then run `{RECORD_COMMAND}`"
        )
    fixed_case, gemms = GEMMS[name]
    callspec = getattr(item, "callspec", None)
    params = dict(callspec.params) if callspec else {}
    case = params.get("case", fixed_case)
    if case is None or case.scale.device != "cuda":
        return []
    shapes = {
        "w1": (2 * case.scale.intermediate, case.scale.hidden),
        "w2": (case.scale.hidden, case.scale.intermediate),
    }
    keys = [
        CompileKey(
            gemm.kernel,
            tactics.TACTICS[0],  # replaced by the case's own below
            cute_compile.DTYPES[gemm.kernel],
            *shapes[gemm.weights],
            case.num_local,
            case.tile_size,
            ARCH,
            mn_limit=gemm.limits,
            top_k=case.top_k if gemm.kernel == "grouped_gemm_finalize" else 1,
        )
        for gemm in gemms(params)
    ]
    return list(with_tactic(keys, pinned_tactic(item.nodeid)))


class _Collector:
    """A pytest plugin that keeps the session's selected items."""

    def __init__(self) -> None:
        self.items: list[pytest.Item] = []

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.items = list(session.items)


def collect() -> list[pytest.Item]:
    """The suite's items, collected as the stage runs it (from the checkout, so the ids and the
    tactics they pin are the stage's)."""
    collector, output = _Collector(), io.StringIO()
    argv = ["--collect-only", "-q", "-p", "no:cacheprovider", "--rootdir", str(ROOT)]
    with contextlib.redirect_stdout(output):  # the list of ids; its tail goes with a failure
        code = pytest.main([*argv, str(SUITE_DIR), *SUITE_ARGS], plugins=[collector])
    if code != pytest.ExitCode.OK:
        tail = output.getvalue()[-2000:]
        raise PlanError(f"collecting {SUITE_DIR} failed (pytest exit {int(code)}):\n{tail}")
    return collector.items


def compute(items: list[pytest.Item] | None = None) -> str:
    """cute_kernels.json's text, from ``items`` (default: the suite, collected now)."""
    cases = {}
    for item in collect() if items is None else items:
        if (keys := item_keys(item)) and (cid := case_id(item)) is not None:
            cases[cid] = keys
    return document(cases)


def _key_text(key: CompileKey) -> str:
    return json.dumps(cute_compile.key_to_json(key), sort_keys=True)


def document(cases: dict[str, list[CompileKey]]) -> str:
    """The file's text: each distinct key once, each case as the indices of its keys; one key
    or case per line, sorted, so a change reads as a short diff."""
    texts = sorted({_key_text(key) for keys in cases.values() for key in keys})
    index = {text: i for i, text in enumerate(texts)}
    key_lines = [f"    {text}" for text in texts]
    case_lines = [
        f"    {json.dumps(cid)}: {json.dumps(sorted(index[_key_text(key)] for key in keys))}"
        for cid, keys in sorted(cases.items())
    ]
    return "\n".join(
        [
            "{",
            f'  "generated_by": {json.dumps(RECORD_COMMAND)},',
            f'  "suite_args": {json.dumps(list(SUITE_ARGS))},',
            '  "keys": [',
            ",\n".join(key_lines),
            "  ],",
            '  "cases": {',
            ",\n".join(case_lines),
            "  }",
            "}",
            "",
        ]
    )


def load(text: str) -> dict[str, list[CompileKey]]:
    """The keys of each case in cute_kernels.json's ``text``; ValueError (or KeyError,
    TypeError) for a file of another version."""
    data = json.loads(text)
    keys = [cute_compile.key_from_json(k) for k in data["keys"]]
    return {cid: [keys[i] for i in indices] for cid, indices in data["cases"].items()}


def stale(committed: str, current: str) -> str:
    """'' if the committed text is the current one, else what differs (the first case named)
    and the command that rewrites it."""
    if committed == current:
        return ""
    fix = f"`{RECORD_COMMAND}` rewrites it"
    if not committed:
        return f"{PLAN_FILE.name} is missing; {fix}"
    try:
        old = load(committed)
    except (ValueError, KeyError, TypeError) as error:
        return f"{PLAN_FILE.name} is unreadable ({error!r}); {fix}"
    new = load(current)
    changed = sorted(cid for cid in old.keys() | new.keys() if old.get(cid) != new.get(cid))
    first = f" (first: {changed[0]})" if changed else " (its layout)"
    return f"{PLAN_FILE.name} is stale: {len(changed)} cases' keys differ{first}; {fix}"
