"""NVFP4 quantise/dequantise: hand-computed blocks, round-trip bounds, and the oracle's bytes."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from stagebot.harness.suites.nvfp4_moe import oracle
from stagebot.harness.suites.nvfp4_moe.cases import CPU, GPU, gpu_marks
from stagebot.harness.suites.nvfp4_moe.tolerances import QUANTIZER_MIN_MATCH, Verdict, bytes_match
from stagebot.kernels import ops

DEVICES = [pytest.param(s.device, id=s.device, marks=gpu_marks(s)) for s in (CPU, GPU)]
S = 2.0**-9  # the smallest e4m3 subnormal

# (values of one 16-element block, global scale, expected 8 packed bytes, expected scale byte),
# worked out by hand from the spec: sf = e4m3(gs * vmax / 6), codes = e2m1(x * gs / sf).
HAND_BLOCKS = [
    pytest.param(
        [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.5, -1, -1.5, -2, -3, -4, -6, 0], 1.0,
        [0x10, 0x32, 0x54, 0x76, 0xA9, 0xCB, 0xED, 0x0F], 0x38, id="every code exactly",
    ),
    pytest.param(
        [6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5, 0],
        1.0, [0x07, 0x22, 0x44, 0x66, 0xA8, 0xCA, 0xEC, 0x0E], 0x38, id="ties go to the even code",
    ),
    pytest.param(
        [6.3, -6.3, 6, 5.9] + [0] * 12, 1.0, [0xF7, 0x77, 0, 0, 0, 0, 0, 0], 0x38,
        id="values saturate at 6 when the scale rounds down",
    ),
    pytest.param(
        [6000, -3000, 2688, 224] + [0] * 12, 1.0, [0xF7, 0x17, 0, 0, 0, 0, 0, 0], 0x7E,
        id="scale saturates at 448",
    ),
    pytest.param([0.0] * 16, 1.0, [0] * 8, 0x00, id="zeros"),
    pytest.param([-0.0] * 16, 1.0, [0x88] * 8, 0x00, id="negative zeros keep the sign"),
    pytest.param(
        [12 * S, -6 * S, S] + [0] * 13, 1.0, [0xD7, 0x01, 0, 0, 0, 0, 0, 0], 0x02,
        id="subnormal scale",
    ),
    pytest.param(
        [9 * S] + [0] * 15, 1.0, [0x06, 0, 0, 0, 0, 0, 0, 0], 0x02,
        id="subnormal scale tie goes to even",
    ),
    pytest.param(
        [3, 1, -0.5] + [0] * 13, 2.0, [0x47, 0x0A, 0, 0, 0, 0, 0, 0], 0x38,
        id="global scale 2",
    ),
    # gs = 3 is not a power of two: sf = e4m3(3 * (0.0390625 * (1/6))) = 0.01953125 (0x0A);
    # fp32 1 / (sf * (1/3)) = 153.59999 but 3 / sf = 153.6, so x = 0.0016276042 (fp32
    # 0x3AD55556) scales to exactly 0.25, a tie that goes to code 0, where 3 / sf gives
    # 0.25000003 -> code 1 (byte 0x17). 0.0390625 scales to 5.9999995 -> 6 (code 7).
    pytest.param(
        [0.0390625, 0.0016276042] + [0] * 14, 3.0, [0x07, 0, 0, 0, 0, 0, 0, 0], 0x0A,
        id="fp32 order: 1/(sf*(1/gs)), not gs/sf",
    ),
]  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("values", "gs", "packed", "sf"), HAND_BLOCKS)
def test_hand_computed_block(device, values, gs, packed, sf):
    x = torch.tensor([values], dtype=torch.float32, device=device)
    got_packed, got_sf = ops.nvfp4_quantize(x, gs, swizzled=False)
    assert got_packed.cpu().tolist() == [packed]
    assert got_sf.cpu().tolist() == [[sf]]
    codes, oracle_sf = oracle.quantize(x.double(), gs)
    assert oracle.pack(codes).cpu().tolist() == [packed], "the oracle disagrees with the hand"
    assert oracle_sf.cpu().tolist() == [[sf]]


def _half_gap(scaled: torch.Tensor) -> torch.Tensor:
    """Half the e2m1 grid spacing around each |scaled value| (1 past the grid: saturation)."""
    a = scaled.abs()
    return torch.where(a <= 2, 0.25, torch.where(a <= 4, 0.5, 1.0))


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    log2_amax=st.floats(-12, 12),
    gs_slack=st.floats(0.25, 1.0),
)
def test_round_trip_is_bounded_by_the_grid_spacing(seed, log2_amax, gs_slack):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 64, generator=g) * 2.0**log2_amax
    gs = gs_slack * 448 * 6 / x.abs().max().item()
    packed, sf = ops.nvfp4_quantize(x, gs, swizzled=False)
    back = ops.nvfp4_dequantize(packed, sf, gs, swizzled=False, dtype=torch.float32)
    block_scale = (sf.view(torch.float8_e4m3fn).float() / gs).repeat_interleave(16, dim=-1)
    scaled = x / block_scale
    bound = _half_gap(scaled) * block_scale * (1 + 1e-6)
    assert ((back - x).abs() <= bound).all()
    vmax = x.unflatten(-1, (-1, 16)).abs().amax(-1)
    normal = gs * vmax / 6 >= 2.0**-6  # the e4m3 scale has 3 mantissa bits in its normal range
    rel = (sf.view(torch.float8_e4m3fn).float() / gs - vmax / 6).abs() / (vmax / 6)
    assert (rel[normal] <= 2.0**-4 + 1e-6).all()


# nvfp4_quantize is not dispatched: it is the torch reference on every device, which follows the
# spec's fp32 steps exactly, so it must equal the oracle byte for byte. QUANTIZER_MIN_MATCH
# (99.9%) is the design's rule for kernels with approximate reciprocals, should one be dispatched.
REFERENCE_QUANTIZER_MATCH = 1.0


def _quantizer_verdicts(
    x: torch.Tensor,
    reference_x: torch.Tensor,
    gs: float,
    min_rate: float = REFERENCE_QUANTIZER_MATCH,
) -> list[Verdict]:
    packed, sf = ops.nvfp4_quantize(x, gs)
    codes, oracle_sf = oracle.quantize(reference_x.double(), gs)
    rows, cols = x.shape[0], x.shape[1] // 16
    return [
        bytes_match(packed, oracle.pack(codes), min_rate, "packed values"),
        bytes_match(oracle.read_scales(sf, rows, cols), oracle_sf, min_rate, "scales"),
    ]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("data", ["normal", "integers", "heavy tails"])
def test_quantize_matches_the_oracle(device, data):
    g = torch.Generator(device=device).manual_seed(7)
    shape = (300, 512)
    x = {
        "normal": lambda: torch.randn(shape, generator=g, device=device),
        "integers": lambda: torch.randint(-5, 5, shape, generator=g, device=device).float(),
        "heavy tails": lambda: torch.randn(shape, generator=g, device=device) ** 3,
    }[data]().to(torch.bfloat16)
    gs = 448 * 6 / x.float().abs().max().item()
    for verdict in _quantizer_verdicts(x, x, gs):
        assert verdict.ok, verdict.detail


def test_quantize_negative_control_fails():
    """1% noise on the input must drop the byte match below the quantiser's tolerance."""
    g = torch.Generator().manual_seed(8)
    x = torch.randn(300, 512, generator=g).to(torch.bfloat16)
    noisy = (x.float() * (1 + 0.01 * torch.randn(x.shape, generator=g))).to(torch.bfloat16)
    gs = 448 * 6 / x.float().abs().max().item()
    assert not any(v.ok for v in _quantizer_verdicts(noisy, x, gs))
    assert not any(v.ok for v in _quantizer_verdicts(noisy, x, gs, QUANTIZER_MIN_MATCH))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("perturbed", [False, True], ids=["exact", "negative-control"])
def test_dequantize_matches_the_oracle(device, perturbed):
    g = torch.Generator(device=device).manual_seed(9)
    x = torch.randn(2, 200, 512, generator=g, device=device)
    gs = torch.tensor([300.0, 700.0], device=device)
    packed, sf = ops.nvfp4_quantize(x, gs)
    op_sf = sf.clone()
    if perturbed:
        op_sf[0, 0] += 1  # one scale one step off
    got = ops.nvfp4_dequantize(packed, op_sf, gs, dtype=torch.float32)
    expected = torch.stack(
        [
            oracle.dequantize(oracle.unpack(packed[e]), oracle.read_scales(sf[e], 200, 32), gs_e)
            for e, gs_e in enumerate(gs.tolist())
        ]
    )
    # fp32 e2m1 * e4m3 is exact; only the division by the global scale rounds.
    exact = torch.allclose(got.double(), expected, rtol=1e-6, atol=0)
    assert exact != perturbed
