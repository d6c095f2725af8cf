"""The finalize's output handed in (``out``, ``out_zeroed``) and fused_moe zeroing it aside, on
the CPU (reference backend): the op's argument checks, its contract when called alone, and the
pipeline's order (the output zeroed before GEMM1, joined before GEMM2, only added into there)."""

from __future__ import annotations

import pytest
from helpers import extras

torch = extras.require("torch")

from stagebot.kernels import moe_pipeline, ops  # noqa: E402
from stagebot.kernels.cute import bench_layer, bench_moe, torch_moe  # noqa: E402
from stagebot.kernels.errors import KernelArgumentError  # noqa: E402

TINY = bench_moe.Layer("Tiny ", experts=16, local_experts=4, top_k=4, hidden=128, inter=64)


@pytest.fixture(scope="module")
def on_the_cpu():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bench_moe, "DEVICE", "cpu")
        patch.setattr(bench_layer, "OURS_BACKEND", "reference")
        yield patch


@pytest.fixture(scope="module")
def call(on_the_cpu) -> dict:
    """grouped_gemm_finalize's arguments: 40 tokens, 16 experts (4 local), top-4, so some
    tokens have no local row."""
    shape = bench_moe.Shape("tiny", "finalize", 40, 16, 4, 4, 128, 64)
    args = bench_moe.build_problem(shape, seed=3).op_args["grouped_gemm_finalize"]
    return dict(args, backend="reference")


def _poisoned(like: torch.Tensor) -> torch.Tensor:
    return torch.full_like(like, float("nan"))


def test_out_is_written_whole_and_out_zeroed_only_adds(call):
    want = ops.grouped_gemm_finalize(**call)
    unrouted = want.eq(0).all(dim=1)
    assert unrouted.any() and not unrouted.all()  # both kinds of token are there
    out = _poisoned(want)
    assert ops.grouped_gemm_finalize(**call, out=out) is out
    assert torch.equal(out, want)  # every element written, unrouted rows 0
    zeroed = torch.zeros_like(want)
    assert torch.equal(ops.grouped_gemm_finalize(**call, out=zeroed, out_zeroed=True), want)
    # Negative control: out_zeroed on an output nobody zeroed leaves the poison in every row.
    got = ops.grouped_gemm_finalize(**call, out=_poisoned(want), out_zeroed=True)
    assert got.isnan().all(dim=1).all()


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(out_zeroed=True), "argument `out_zeroed` is True without out; it says the out"),
        (dict(out_zeroed=1), "argument `out_zeroed` is 1; it must be a bool"),
        (dict(out="rows"), "argument `out` is a str; it must be a tensor"),
        (dict(out=torch.zeros(40, 128)), "argument `out` has dtype torch.float32"),
        (
            dict(out=torch.zeros(40, 64, dtype=torch.bfloat16)),
            "argument `out` has shape (40, 64)",
        ),
        (
            dict(out=torch.zeros(128, 40, dtype=torch.bfloat16).t()),
            "argument `out` is not contiguous; it must be contiguous",
        ),
    ],
)
def test_a_wrong_out_is_refused_with_what_it_must_be(call, change, message):
    with pytest.raises(KernelArgumentError) as error:
        ops.grouped_gemm_finalize(**{**call, **change})
    assert message in str(error.value)


@pytest.fixture(scope="module")
def tiny(on_the_cpu):
    problem = bench_layer.build(bench_layer.Case(TINY, 40), seed=1)
    experts, weights = torch_moe.route(problem.x, problem.router, TINY.top_k)
    args = dict(problem.nvfp4, x=problem.x, token_selected_experts=experts)
    return dict(args, token_final_scales=weights, backend="reference")


def _recorded(monkeypatch, order: list[str], zero=moe_pipeline.zero_aside):
    """Both step lists record each step's name; the output's zeroing is ``zero`` and its join
    records "join"; the finalize records whether it was told out_zeroed and got a zero out."""
    for make in ("checked_steps", "unchecked_steps"):
        original = getattr(moe_pipeline, make)

        def steps(*a, original=original):
            def named(name, fn):
                def step(*args, **kwargs):
                    order.append(name)
                    if name == "gemm_finalize" and kwargs.get("out_zeroed"):
                        out = kwargs["out"]
                        order.append("out is zero" if out.eq(0).all() else "out is NOT zero")
                    return fn(*args, **kwargs)

                return step

            def zeroed_output(num_tokens, n, device):
                order.append("zeroed_output")
                out = torch.full((num_tokens, n), float("nan"), dtype=torch.bfloat16)
                join = zero(out)
                return out, lambda: (order.append("join"), join())

            found = original(*a)
            steps_run = [f for f in found._fields if f != "zeroed_output"]
            wrapped = {f: named(f, getattr(found, f)) for f in steps_run}
            return found._replace(**wrapped, zeroed_output=zeroed_output)

        monkeypatch.setattr(moe_pipeline, make, steps)


@pytest.mark.parametrize("checked", [True, False])
def test_fused_moe_zeroes_the_output_first_and_joins_before_gemm2(tiny, monkeypatch, checked):
    inside = moe_pipeline.fused_moe(**tiny, checked=checked, zero_output_aside=False)
    order: list[str] = []
    _recorded(monkeypatch, order)
    got = moe_pipeline.fused_moe(**tiny, checked=checked, zero_output_aside=True)
    assert order == [
        "zeroed_output", "quantize", "sort", "permute", "gemm_swiglu", "join",
        "gemm_finalize", "out is zero",
    ]  # fmt: skip
    assert torch.equal(got, inside)  # the same bits as the finalize zeroing its own output
    assert torch.equal(got, ops.fused_moe(**tiny))


def test_fused_moe_without_the_zeroing_aside_fails_the_check(tiny, monkeypatch):
    """Negative control: a pipeline whose side step does not zero the output hands the
    finalize a poisoned one; its rows then differ from the reference (NaN)."""
    want = ops.fused_moe(**tiny)
    order: list[str] = []
    _recorded(monkeypatch, order, zero=lambda out: lambda: None)
    got = moe_pipeline.fused_moe(**tiny, checked=False, zero_output_aside=True)
    assert "out is NOT zero" in order
    assert not bench_moe.compare(got, want)["ok"] and got.isnan().all(dim=1).all()


@pytest.mark.parametrize("change", [dict(deterministic=True), dict(disable_finalize_fusion=True)])
def test_a_finalize_that_writes_every_row_gets_no_zeroing_aside(tiny, monkeypatch, change):
    order: list[str] = []
    _recorded(monkeypatch, order)
    moe_pipeline.fused_moe(**{**tiny, **change}, checked=False, zero_output_aside=True)
    assert "zeroed_output" not in order and "join" not in order


def test_by_default_the_finalize_zeroes_its_own_output(tiny, monkeypatch):
    """The side stream made the layer slower (NOTES.md, sixteenth session): off by default."""
    order: list[str] = []
    _recorded(monkeypatch, order)
    got = moe_pipeline.fused_moe(**tiny, checked=False)
    assert "zeroed_output" not in order and "join" not in order
    assert torch.equal(got, ops.fused_moe(**tiny))


def test_a_failing_step_still_joins_the_zeroing(tiny, monkeypatch):
    """The side stream's zeroing must not outlive its output: a step that raises before GEMM2
    joins it on the way out."""
    order: list[str] = []
    _recorded(monkeypatch, order)

    def broken(*args, **kwargs):
        raise RuntimeError("GEMM1 failed")

    original = moe_pipeline.unchecked_steps
    monkeypatch.setattr(
        moe_pipeline, "unchecked_steps", lambda b: original(b)._replace(gemm_swiglu=broken)
    )
    with pytest.raises(RuntimeError, match="GEMM1 failed"):
        moe_pipeline.fused_moe(**tiny, checked=False, zero_output_aside=True)
    assert order[-1] == "join"
