"""The Triton elementwise kernels vs the reference (nvfp4.quantize + swizzle_sf; moe_unpermute).

On a GPU they run compiled; without CUDA they run under Triton's CPU interpreter
(TRITON_INTERPRET=1 while this module imports triton and defines its kernels, then restored, so
other tests and child processes do not inherit it). Without triton installed they skip.
"""

from __future__ import annotations

import importlib
import os

import pytest
from helpers import extras

torch = extras.require("torch")

from stagebot.kernels import layouts, moe_tables, nvfp4  # noqa: E402
from stagebot.kernels.errors import KernelArgumentError  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


_ENV = pytest.MonkeyPatch()


def _import_kernels():
    """The module under test; without CUDA, built for Triton's CPU interpreter.

    @triton.jit reads TRITON_INTERPRET when it decorates, and triton's lazy gluon import checks
    it again at the first launch, so both happen while it is set (it is restored at the end of
    this module's import).
    """
    if DEVICE == "cpu" and "TRITON_INTERPRET" not in os.environ:
        _ENV.setenv("TRITON_INTERPRET", "1")
    extras.require("triton")  # runs these on the CPU too, under its interpreter
    module = importlib.import_module("stagebot.kernels.triton_elementwise")
    if DEVICE == "cpu":
        importlib.import_module("triton.experimental.gluon")
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    if DEVICE == "cpu" and not isinstance(tl.zeros, InterpretedFunction):
        pytest.skip(
            "no CUDA, and triton was imported without TRITON_INTERPRET=1 before this module "
            "(run with TRITON_INTERPRET=1)",
            allow_module_level=True,
        )
    return module


try:
    te = _import_kernels()
except BaseException:  # a skip (or an error) ends this module here: restore the variable first
    _ENV.undo()
    raise
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")

import triton  # noqa: E402  (after _import_kernels, which may select the interpreter)
import triton.language as tl  # noqa: E402


@triton.jit
def _conversions_kernel(x_ptr, code_ptr, value_ptr, bf16_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    code, value = te._e4m3(x)
    tl.store(code_ptr + offs, code.to(tl.uint8), mask=mask)
    tl.store(value_ptr + offs, value, mask=mask)
    tl.store(bf16_ptr + offs, te._f32_to_bf16(x), mask=mask)


_ENV.undo()  # every kernel of this module is defined: the interpreter choice is made


def test_conversions_round_to_nearest_even_on_every_tie_as_torch_does():
    every_e4m3 = nvfp4.e4m3_decode(torch.arange(127, dtype=torch.uint8))  # 0 .. 448
    ties = (every_e4m3[1:] + every_e4m3[:-1]) / 2  # exact in fp32
    g = torch.Generator().manual_seed(1)
    x = torch.cat([every_e4m3, ties, torch.rand(4096, generator=g) * 448]).to(DEVICE)
    x = torch.cat([x, torch.rand(1024, generator=g).to(DEVICE) * 2**-6])  # e4m3 subnormals
    # bf16 ties: fp32 bit patterns whose low 16 bits are exactly half a bf16 step.
    high = torch.randint(0x3000, 0x4400, (1024,), generator=g, dtype=torch.int32)
    x = torch.cat([x, ((high << 16) | 0x8000).view(torch.float32).to(DEVICE)])
    code = torch.empty(x.shape, dtype=torch.uint8, device=DEVICE)
    value = torch.empty_like(x)
    bf16 = torch.empty(x.shape, dtype=torch.bfloat16, device=DEVICE)
    _conversions_kernel[(triton.cdiv(x.numel(), 1024),)](
        x, code, value, bf16.view(torch.int16), x.numel(), BLOCK=1024
    )
    in_range = x <= 448
    assert torch.equal(code[in_range], nvfp4.e4m3_encode(x[in_range]))
    assert torch.equal(value[in_range], nvfp4.e4m3_decode(code[in_range]))
    assert torch.equal(bf16, x.to(torch.bfloat16))


def _swiglu_input(m: int, n: int, seed: int) -> torch.Tensor:
    """bf16 [m, n] over many magnitudes, with an all-zero block, signed zeros and huge values."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randn(m, n, generator=g) * torch.exp2(torch.randint(-8, 9, (m, 1), generator=g))
    y[0, :128] = 0.0
    y[1, :64] = -0.0
    y[2, ::7] = 3e4
    return y.to(torch.bfloat16).to(DEVICE)


def _reference_swiglu_quantize(y: torch.Tensor, gs: torch.Tensor):
    lin_gate = layouts.deinterleave_linear_and_gate(y.float(), layouts.SWIGLU_GROUP_SIZE, dim=-1)
    linear, gate = lin_gate.chunk(2, dim=-1)
    packed, sf = nvfp4.quantize(linear * torch.nn.functional.silu(gate), gs)
    return packed, layouts.swizzle_sf(sf)


def _equal_fraction(got: torch.Tensor, want: torch.Tensor) -> float:
    assert got.shape == want.shape and got.dtype == want.dtype
    return (got == want).float().mean().item()


@pytest.mark.parametrize(
    "m, n",
    [
        pytest.param(200, 256, id="rows padded to 128, 2 groups per program"),
        pytest.param(128, 384, id="3 groups, one per program"),
        pytest.param(16, 1024, id="decode-sized"),
    ],
)
def test_swiglu_quantize_matches_the_reference(m, n):
    y = _swiglu_input(m, n, seed=m + n)
    gs = torch.tensor([448.0 * 6 / 40.0], device=DEVICE)
    packed, sf = te.swiglu_quantize(y, gs)
    want_packed, want_sf = _reference_swiglu_quantize(y, gs)
    assert sf.shape == (layouts.swizzled_sf_size(m, n // 32),)
    # exp may differ from torch's in the last bit, moving a value across a rounding boundary.
    assert _equal_fraction(packed, want_packed) >= 0.999
    assert _equal_fraction(sf, want_sf) >= 0.999


def test_swiglu_quantize_with_another_global_scale_does_not_match():
    """Negative control: the comparison above can fail."""
    y = _swiglu_input(128, 256, seed=3)
    gs = torch.tensor([448.0 * 6 / 40.0], device=DEVICE)
    packed, sf = te.swiglu_quantize(y, gs * 1.3)
    want_packed, want_sf = _reference_swiglu_quantize(y, gs)
    assert _equal_fraction(sf, want_sf) < 0.5
    assert _equal_fraction(packed, want_packed) < 0.99


def _routing(num_tokens: int, top_k: int, seed: int):
    """Real tables from moe_sort: 16 experts, 4 of them local, so some (token, k) are -1."""
    g = torch.Generator().manual_seed(seed)
    experts = torch.stack([torch.randperm(16, generator=g)[:top_k] for _ in range(num_tokens)])
    tables = moe_tables.moe_sort(experts.to(DEVICE), 4, 4, 128)
    scales = torch.rand(num_tokens, top_k, generator=g).to(DEVICE)
    return tables.expanded_idx_to_permuted_idx, scales


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16 rows", "fp32 rows"])
def test_unpermute_matches_the_reference_bit_for_bit(dtype):
    idx, scales = _routing(num_tokens=42, top_k=4, seed=5)  # not a multiple of the token block
    assert (idx == -1).any() and (idx >= 0).any()
    n = 1500  # not a multiple of the column block
    g = torch.Generator().manual_seed(6)
    permuted = torch.randn(int(idx.max()) + 1, n, generator=g).to(dtype).to(DEVICE)
    got = te.unpermute(permuted, idx, scales)
    want = moe_tables.moe_unpermute(permuted, idx, scales).to(torch.bfloat16)
    assert got.dtype == torch.bfloat16 and got.shape == (42, n)
    assert torch.equal(got, want)


def test_unpermute_with_scales_swapped_between_k_does_not_match():
    """Negative control: the weights must be applied to their own k."""
    idx, scales = _routing(num_tokens=40, top_k=4, seed=7)
    permuted = torch.randn(int(idx.max()) + 1, 256).to(torch.bfloat16).to(DEVICE)
    got = te.unpermute(permuted, idx, scales[:, [1, 0, 2, 3]])
    want = moe_tables.moe_unpermute(permuted, idx, scales)
    assert not torch.allclose(got.float(), want.float(), rtol=1e-2, atol=1e-2)


def _register_order() -> torch.Tensor:
    """Position 16 s + 8 h + 2 q + j of a 64-value block holds value 16 q + 8 h + s + 4 j."""
    s, h, q, j = torch.meshgrid(*(torch.arange(n) for n in (4, 2, 4, 2)), indexing="ij")
    return (16 * q + 8 * h + s + 4 * j).flatten()


OPERAND_ORDERS = {"smem": torch.tensor([0, 4, 1, 5, 2, 6, 3, 7]), "registers": _register_order()}


def _reference_operand(
    packed: torch.Tensor, sf_swizzled: torch.Tensor, order: str = "smem"
) -> torch.Tensor:
    """fp16 of e2m1 * e4m3 * 2^-7 (exact), each block of the order's length permuted by it."""
    rows, k = packed.shape[0], 2 * packed.shape[1]
    sf = layouts.unswizzle_sf(sf_swizzled.cpu(), rows, k // 16)
    values = nvfp4.block_values(packed.cpu(), sf) * 2.0**-7
    permutation = OPERAND_ORDERS[order]
    return values.unflatten(-1, (-1, len(permutation)))[..., permutation].flatten(-2).half()


def test_the_register_order_is_a_permutation_of_each_64_value_block():
    assert sorted(_register_order().tolist()) == list(range(64))


@pytest.mark.parametrize("order", te.OPERAND_ORDERS)
@pytest.mark.parametrize("rows, k", [(128, 64), (256, 320), (384, 1024)])
def test_nvfp4_operand_is_the_kernels_fp16_operand_bit_for_bit(rows, k, order):
    """Random values over 24 binades: both signs, zero rows, subnormal and large scales (the
    K order is the reference's; that it is the CuTe kernels' is gpu_check's to show)."""
    g = torch.Generator().manual_seed(rows + k)
    exponents = torch.randint(-14, 10, (rows, 1), generator=g)
    x = torch.randn(rows, k, generator=g) * torch.exp2(exponents)
    x[0] = 0.0
    gs = torch.tensor(448.0 * 6 / x.abs().max().item())
    packed, sf = nvfp4.quantize(x, gs)
    assert int(sf.min()) < 8 and int(sf.max()) > 0x70  # subnormal and large scales both occur
    sf_swizzled = layouts.swizzle_sf(sf)
    got = te.nvfp4_operand(packed.to(DEVICE), sf_swizzled.to(DEVICE), order=order)
    want = _reference_operand(packed, sf_swizzled, order)
    assert got.dtype == torch.float16 and got.shape == (rows, k)
    assert torch.equal(got.cpu().view(torch.int16), want.view(torch.int16))


@pytest.mark.parametrize("programs", [te.OPERAND_PROGRAMS, 3])
def test_nvfp4_operand_writes_only_the_valid_tiles_rows(monkeypatch, programs):
    """With valid_tiles (the GEMM's num_non_exiting_tiles) the rows past them stay as
    allocated: poisoned here with NaN. With 3 programs, each converts every third row block."""
    rows, k, tile = 512, 128, 128
    monkeypatch.setattr(te, "OPERAND_PROGRAMS", programs)
    packed, sf = nvfp4.quantize(torch.randn(rows, k), torch.tensor(448.0 * 6 / 4))
    sf_swizzled = layouts.swizzle_sf(sf)
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **kw: real_empty(*a, **kw).fill_(float("nan")))
    tiles = torch.tensor([3], dtype=torch.int32, device=DEVICE)
    got = te.nvfp4_operand(packed.to(DEVICE), sf_swizzled.to(DEVICE), tiles, tile).cpu()
    want = _reference_operand(packed, sf_swizzled)
    assert torch.equal(got[: 3 * tile].view(torch.int16), want[: 3 * tile].view(torch.int16))
    assert bool(torch.isnan(got[3 * tile :]).all())


def test_nvfp4_operand_rejects_what_it_cannot_lay_out():
    packed = torch.zeros(100, 32, dtype=torch.uint8, device=DEVICE)
    sf = torch.zeros(layouts.swizzled_sf_size(100, 4), dtype=torch.uint8, device=DEVICE)
    with pytest.raises(KernelArgumentError, match="rows must be a multiple of 128"):
        te.nvfp4_operand(packed, sf)
    with pytest.raises(KernelArgumentError, match="it must hold 512 uint8"):
        te.nvfp4_operand(packed[:0].new_zeros(128, 32), sf[:10])
    packed, sf = packed.new_zeros(128, 32), sf.new_zeros(512)
    with pytest.raises(KernelArgumentError, match="valid_tiles` is torch.int64"):
        te.nvfp4_operand(packed, sf, torch.ones(1, dtype=torch.int64, device=DEVICE))
    with pytest.raises(KernelArgumentError, match="`order` is 'rs'; it must be one of"):
        te.nvfp4_operand(packed, sf, order="rs")
