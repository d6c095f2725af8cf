"""apply/strip and the load hooks on small hinted modules, one process: each rank's graph is
sharded in turn, its collectives removed, and the per-rank outputs summed by hand - which is what
the final all-reduce would do - then compared with the unsharded output."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from stagebot.harness.suites.sharding_ir import hints
from stagebot.harness.suites.sharding_ir.blocks.norm import RMSNorm
from stagebot.harness.suites.sharding_ir.blocks.sink_attention import sink_attention_op
from stagebot.harness.suites.sharding_ir.blocks.softcap_attention import softcap_attention_op
from stagebot.harness.suites.sharding_ir.build import poison_
from stagebot.harness.suites.sharding_ir.checks import collective_count_check, hint_count
from stagebot.harness.suites.sharding_ir.dist_config import DistConfig
from stagebot.harness.suites.sharding_ir.errors import ShardingIRError
from stagebot.harness.suites.sharding_ir.sabotage import remove_collectives
from stagebot.harness.suites.sharding_ir.sharding import apply_sharding_hints, strip_sharding_hints

HIDDEN, INTER = 8, 16


class FusedMLP(nn.Module):
    """gate/up fused in one colwise weight (output_sizes), split, head views, rowwise + bias."""

    def __init__(self) -> None:
        super().__init__()
        self.gate_up = nn.Linear(HIDDEN, 2 * INTER)
        self.down = nn.Linear(INTER, HIDDEN)

    def forward(self, x):
        b, s, _ = x.shape
        gate_up = hints.linear(x, self.gate_up.weight, self.gate_up.bias, "colwise", [INTER, INTER])
        gate, up = hints.split_with_sizes(gate_up, [INTER, INTER], -1, True)
        h = hints.view(F.silu(gate) * up, [b, s, 4, INTER // 4], 2)
        h = hints.view(h * 2.0, [b, s, INTER], 2)
        return hints.all_reduce(hints.linear(h, self.down.weight, self.down.bias, "rowwise"))


class MoE(nn.Module):
    def __init__(self, num_experts: int, activation: str = "silu") -> None:
        super().__init__()
        self.activation = activation
        self.w1 = nn.ParameterList(torch.randn(INTER, HIDDEN) for _ in range(num_experts))
        self.w2 = nn.ParameterList(torch.randn(HIDDEN, INTER) for _ in range(num_experts))
        self.w3 = nn.ParameterList(torch.randn(INTER, HIDDEN) for _ in range(num_experts))

    def forward(self, x, ids, weights):
        return hints.all_reduce(
            hints.moe(x, ids, weights, list(self.w1), list(self.w2), list(self.w3), self.activation)
        )


class Colwise(nn.Module):
    def __init__(self, rows: int, min_local: int) -> None:
        super().__init__()
        self.proj = nn.Linear(HIDDEN, rows, bias=False)
        self.min_local = min_local

    def forward(self, x):
        return hints.linear(x, self.proj.weight, None, "colwise", None, self.min_local)


def _sharded(module: nn.Module, args: tuple, dc: DistConfig) -> torch.fx.GraphModule:
    gm = torch.export.export(module, args).module()
    return strip_sharding_hints(apply_sharding_hints(gm, dc))


def _summed_over_ranks(module: nn.Module, args: tuple, config: str) -> torch.Tensor:
    total = 0
    for rank in range(DistConfig.named(config).world_size):
        gm = _sharded(module, args, DistConfig.named(config, rank))
        assert remove_collectives(gm) == 1
        total = total + gm(*args)
    return total


@pytest.mark.parametrize("config", ["tp-only", "tep"])
def test_fused_colwise_split_view_rowwise_bias(config):
    torch.manual_seed(0)
    module, x = FusedMLP(), torch.randn(2, 3, HIDDEN)
    torch.testing.assert_close(
        _summed_over_ranks(module, (x,), config), module(x), rtol=1e-5, atol=1e-6
    )


def test_fused_pieces_are_split_one_by_one():
    module = FusedMLP()
    gm = _sharded(module, (torch.randn(1, 2, HIDDEN),), DistConfig.named("tp-only", rank=1))
    w = module.gate_up.weight.detach()
    expected = torch.cat((w[8:16], w[24:32]))  # rank 1's half of the gate rows, then of the up rows
    assert torch.equal(gm.get_parameter("gate_up.weight"), expected)
    assert torch.equal(
        gm.get_parameter("down.bias"), torch.zeros(HIDDEN)
    )  # bias kept on rank 0 only
    assert torch.equal(gm.get_parameter("down.weight"), module.down.weight.detach()[:, 8:])


@pytest.mark.parametrize(
    ("config", "num_experts"), [("tep", 8), ("tep", 5), ("ep-only", 5), ("tp-only", 4)]
)
def test_moe_expert_and_tensor_parallel(config, num_experts):
    torch.manual_seed(0)
    module, tokens = MoE(num_experts), 16
    x = torch.randn(tokens, HIDDEN)
    ids = torch.stack([torch.randperm(num_experts)[:2] for _ in range(tokens)])
    weights = torch.rand(tokens, 2)
    args = (x, ids, weights)
    torch.testing.assert_close(
        _summed_over_ranks(module, args, config), module(*args), rtol=1e-5, atol=1e-5
    )


def test_moe_keeps_its_activation_through_sharding_and_lowering():
    """A sharder or lowering that dropped the hint's activation would compute SiLU on the ranks."""
    torch.manual_seed(0)
    module, tokens = MoE(4, activation="relu"), 16
    ids = torch.stack([torch.randperm(4)[:2] for _ in range(tokens)])
    args = (torch.randn(tokens, HIDDEN), ids, torch.rand(tokens, 2))
    expected = module(*args)
    module.activation = "silu"
    assert not torch.allclose(module(*args), expected)  # the activation is load-bearing here
    module.activation = "relu"
    torch.testing.assert_close(_summed_over_ranks(module, args, "tep"), expected)


def test_moe_drops_other_ranks_experts():
    module = MoE(5)
    args = (torch.randn(4, HIDDEN), torch.zeros(4, 2, dtype=torch.long), torch.ones(4, 2))
    gm = _sharded(module, args, DistConfig.named("tep", rank=3))  # ep rank 1 of 2: experts 2..4
    kept = sorted({name.split(".")[1] for name, _ in gm.named_parameters()})
    assert kept == ["2", "3", "4"]
    assert gm.get_parameter("w1.2").shape == (INTER // 2, HIDDEN)  # moe_tp 2
    assert gm.get_parameter("w2.2").shape == (HIDDEN, INTER // 2)


@pytest.mark.parametrize(("rows", "expected_chunk"), [(8, [0, 0, 1, 1]), (4, [0, 0, 0, 0])])
def test_units_fewer_than_tp_are_replicated(rows, expected_chunk):
    module = Colwise(rows, min_local=4)
    x = torch.randn(1, HIDDEN)
    w = module.proj.weight.detach()
    for rank, chunk in enumerate(expected_chunk):
        gm = _sharded(module, (x,), DistConfig.named("tep", rank))
        assert torch.equal(gm.get_parameter("proj.weight"), w[4 * chunk : 4 * chunk + 4])


def test_size_that_cannot_be_split_names_node_size_and_tp():
    module = Colwise(12, min_local=4)  # 3 units over 4 ranks: neither split nor replicate
    with pytest.raises(
        ShardingIRError, match=r"node 'linear' \(proj.weight\): cannot split size 12 over TP size 4"
    ):
        _sharded(module, (torch.randn(1, HIDDEN),), DistConfig.named("tep", 0))


def test_strip_alone_lowers_every_hint():
    module, x = FusedMLP(), torch.randn(2, 3, HIDDEN)
    gm = torch.export.export(module, (x,)).module()
    assert hint_count(gm) == 6
    apply_sharding_hints(gm, DistConfig(world_size=1, rank=0, moe_tp=1, moe_ep=1))  # no-op below 2
    strip_sharding_hints(gm)
    assert hint_count(gm) == 0
    torch.testing.assert_close(gm(x), module(x))


def test_load_hooks_take_full_and_sharded_checkpoints():
    torch.manual_seed(0)
    module, x = FusedMLP(), torch.randn(2, 3, HIDDEN)
    gm = _sharded(module, (x,), DistConfig.named("tp-only", rank=1))
    remove_collectives(gm)
    sharded = {k: v.clone() for k, v in gm.state_dict().items()}
    expected = gm(x)
    for checkpoint in (module.state_dict(), sharded):
        poison_(gm)
        gm.load_state_dict(checkpoint, strict=True)
        assert torch.equal(gm(x), expected)


class NormedProjection(nn.Module):
    """A colwise projection of ``rows`` (in units of ``unit``) normalised over all its rows, as
    OLMo2's q/k norms: the statistic averaged over the ranks, the weight following the rows."""

    def __init__(self, rows: int, unit: int, reduce_op: str = "avg") -> None:
        super().__init__()
        self.proj = nn.Linear(HIDDEN, rows, bias=False)
        self.norm = RMSNorm(rows, eps=1e-6, offset=0.0, across_ranks=True)
        self.unit, self.reduce_op = unit, reduce_op
        with torch.no_grad():
            self.norm.weight.copy_(torch.arange(rows, dtype=torch.float))

    def forward(self, x):
        y = hints.linear(x, self.proj.weight, None, "colwise", None, self.unit)
        if self.reduce_op == "avg":
            return self.norm(y, follows=self.proj.weight)
        variance = hints.all_reduce(y.pow(2).mean(-1, keepdim=True), self.reduce_op)
        return hints.shard_like(self.norm.weight, self.proj.weight) * y * torch.rsqrt(variance)


@pytest.mark.parametrize(("rows", "chunks"), [(16, [0, 1, 2, 3]), (8, [0, 0, 1, 1])])
def test_a_following_weight_takes_its_leaders_rows(rows, chunks):
    """Split as its leader is, units replicated where fewer than ranks (KV heads below TP)."""
    module = NormedProjection(rows, unit=4)
    for rank, chunk in enumerate(chunks):
        gm = _sharded(module, (torch.randn(1, HIDDEN),), DistConfig.named("tep", rank))
        assert gm.get_parameter("norm.weight").tolist() == list(range(4 * chunk, 4 * chunk + 4))
        assert torch.equal(gm.get_parameter("proj.weight"), module.proj.weight[4 * chunk :][:4])


def test_an_averaged_statistic_is_an_averaging_collective_of_the_norm():
    """The structural check reads the reduce op: a block hinting a sum where its statistic needs
    an average fails it (numerically it is the OLMo2 case's control-avg-as-sum-numeric)."""
    x = torch.randn(1, HIDDEN)
    expected = {("norm", "avg"): 1}
    right = _sharded(NormedProjection(8, unit=4), (x,), DistConfig.named("tp-only", 0))
    assert collective_count_check(right, expected).ok
    wrong = _sharded(
        NormedProjection(8, unit=4, reduce_op="sum"), (x,), DistConfig.named("tp-only", 0)
    )
    result = collective_count_check(wrong, expected)
    assert not result.ok and "norm [avg]: (0, 1)" in result.detail, result.detail


def test_a_follower_of_a_weight_no_linear_splits_is_refused():
    class Orphan(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Parameter(torch.ones(4)), nn.Parameter(torch.ones(4, 2))

        def forward(self, x):
            return x * hints.shard_like(self.a, self.b)

    with pytest.raises(ShardingIRError, match=r"a follows the rows of b, which no colwise linear"):
        _sharded(Orphan(), (torch.randn(4),), DistConfig.named("tp-only", 0))


def test_a_follower_of_another_size_is_refused():
    class Mismatch(NormedProjection):
        def forward(self, x):
            y = hints.linear(x, self.proj.weight, None, "colwise", None, self.unit)
            return y.sum() * hints.shard_like(self.norm.weight, self.proj.weight)

    module = Mismatch(8, unit=4)
    module.norm.weight = nn.Parameter(torch.ones(4))
    with pytest.raises(ShardingIRError, match=r"4 entries along dim 0, its leader proj.weight 8"):
        _sharded(module, (torch.randn(1, HIDDEN),), DistConfig.named("tp-only", 0))


class PerHead(nn.Module):
    """A colwise projection of ``heads`` heads of 4 rows and a weight with one entry per head that
    follows it (as attention sinks follow q's heads: ``rows_per_entry`` 4)."""

    def __init__(self, heads: int, per: int = 4) -> None:
        super().__init__()
        self.proj = nn.Linear(HIDDEN, 4 * heads, bias=False)
        self.per_head = nn.Parameter(torch.arange(heads, dtype=torch.float))
        self.per = per

    def forward(self, x):
        y = hints.linear(x, self.proj.weight, None, "colwise", None, 4)
        return y.sum(-1, keepdim=True) * hints.shard_like(
            self.per_head, self.proj.weight, 0, self.per
        )


@pytest.mark.parametrize(
    ("heads", "entries"), [(4, [[0], [1], [2], [3]]), (2, [[0], [0], [1], [1]])]
)
def test_a_per_head_weight_takes_its_leaders_heads(heads, entries):
    """An entry per 4 rows: rank r holds the entries of the heads whose rows it holds, replicated
    alike where heads are fewer than ranks; the rows check finds them, and fails on another
    rank's entries."""
    from stagebot.harness.suites.sharding_ir.checks import follower_rows_check

    module = PerHead(heads)
    full = {k: v.detach().clone() for k, v in module.state_dict().items()}
    for rank, expected in enumerate(entries):
        gm = _sharded(module, (torch.randn(1, HIDDEN),), DistConfig.named("tep", rank))
        assert gm.get_parameter("per_head").tolist() == expected
        assert follower_rows_check(gm, full, {"per_head": "proj.weight"}).ok
        gm.per_head = nn.Parameter(full["per_head"][[(expected[0] + 1) % heads]])
        result = follower_rows_check(gm, full, {"per_head": "proj.weight"})
        assert not result.ok and "4 rows each" in result.detail, result.detail


def test_a_per_head_weight_of_another_size_or_unit_is_refused():
    module = PerHead(4, per=2)  # 4 entries, one per 2 rows: 8 rows, not the leader's 16
    with pytest.raises(ShardingIRError, match=r"one entry per 2 rows of its leader.*so 8 entries"):
        _sharded(module, (torch.randn(1, HIDDEN),), DistConfig.named("tp-only", 0))
    module = PerHead(4, per=8)  # an entry per 8 rows where the leader splits by heads of 4
    module.per_head = nn.Parameter(torch.ones(2))
    with pytest.raises(ShardingIRError, match=r"units of 4 rows.*8 rows per entry"):
        _sharded(module, (torch.randn(1, HIDDEN),), DistConfig.named("tp-only", 0))


class GroupedAttention(nn.Module):
    """4 query heads over 2 KV heads of 4; ``opaque``: the softmax is the ``softcap_attention`` op,
    else plain torch ops repeating each KV head twice, as the unsharded ratio says."""

    def __init__(self, opaque: bool) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(HIDDEN, 16), nn.Linear(HIDDEN, 8), nn.Linear(HIDDEN, 8)
        self.o, self.opaque = nn.Linear(16, HIDDEN), opaque

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (
            hints.view(
                hints.linear(x, p.weight, p.bias, "colwise", None, 4), [b, s, n, 4], 2
            ).transpose(1, 2)
            for p, n in ((self.q, 4), (self.k, 2), (self.v, 2))
        )
        if self.opaque:
            out = softcap_attention_op(q, k, v, 0.5, 2.0, 3)
        else:
            k, v = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
            out = torch.softmax(torch.tanh(q @ k.transpose(-1, -2) * 0.25) * 2.0, -1) @ v
        out = hints.view(out.transpose(1, 2), [b, s, 16], 2)
        return hints.all_reduce(hints.linear(out, self.o.weight, self.o.bias, "rowwise", None, 4))


def test_an_opaque_attention_reads_the_head_ratio_of_its_sharded_inputs():
    """On tep each rank holds 1 query head and a replicated KV head: the op computes from them;
    the same attention in plain torch ops keeps the unsharded ratio and no longer fits."""
    torch.manual_seed(0)
    x = torch.randn(2, 5, HIDDEN)
    module = GroupedAttention(opaque=True)
    torch.testing.assert_close(_summed_over_ranks(module, (x,), "tep"), module(x))
    with pytest.raises(RuntimeError, match=r"shape|size"):
        _summed_over_ranks(GroupedAttention(opaque=False), (x,), "tep")


def test_the_softcap_attention_op_caps_and_windows():
    """2 query heads on 1 KV head: scores capped as ``cap * tanh(s / cap)``, causal; a window of 1
    leaves each query its own position."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, heads, 6, 4, generator=gen) for heads in (2, 1, 1))
    capped = softcap_attention_op(q, k, v, 1.0, 0.5, 0)
    scores = torch.tanh(q @ k.transpose(-1, -2) / 0.5) * 0.5
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    torch.testing.assert_close(capped, scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v)
    own = softcap_attention_op(q, k, v, 1.0, 0.0, 1)
    torch.testing.assert_close(own, v.expand(1, 2, 6, 4))


def test_the_sink_attention_op_is_hfs_sink_scaling():
    """A softmax over [scores, sink] with the sink column dropped is the plain softmax scaled by
    sigmoid(logsumexp(scores) - sink), as HF's GraniteSWA writes it; 4 query heads on 2 KV heads."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, heads, 6, 4, generator=gen) for heads in (4, 2, 2))
    sinks = torch.tensor([-1.0, 0.0, 1.0, 3.0])
    out = sink_attention_op(q, k, v, sinks, 0.5, 0.0, 0)
    k2, v2 = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    scores = (q @ k2.transpose(-1, -2) * 0.5).masked_fill(~causal, float("-inf"))
    scale = (scores.logsumexp(-1) - sinks[:, None]).sigmoid()[..., None]
    torch.testing.assert_close(out, scores.softmax(-1) @ v2 * scale)
    with pytest.raises(ValueError, match=r"\(2,\) sinks for 4 query heads"):
        sink_attention_op(q, k, v, sinks[:2], 0.5, 0.0, 0)


def _sharded_granite_swa(rank: int):
    """GraniteSWA's tiny IR, its unsharded state and rank ``rank``'s tp-only graph."""
    from stagebot.harness.suites.sharding_ir.build import build_ir_model
    from stagebot.harness.suites.sharding_ir.registry import REGISTRY

    model = build_ir_model(REGISTRY["ibm-granite/granite-swash-2b"])
    full = {k: v.clone() for k, v in model.state_dict().items()}
    dc = DistConfig.named("tp-only", rank)
    return model, full, dc, _sharded(model, _short_inputs(model), dc)


def _short_inputs(model):
    from stagebot.harness.suites.sharding_ir.build import prefill_inputs

    return prefill_inputs(model.arch.vocab_size, batch=1, seq=8)


def test_sinks_split_other_than_the_query_heads_fail_a_structural_check():
    """Rank 0 of 2 holds heads 0-1 of 4: sinks 0 and 2 have the right shape (local-shapes passes)
    and the wrong heads, which follower-rows sees without running the model."""
    from stagebot.harness.suites.sharding_ir.checks import follower_rows_check, local_shape_check

    model, full, dc, gm = _sharded_granite_swa(0)
    shapes, followers = model.expected_local_shapes(dc), model.expected_followers()
    assert local_shape_check(gm, shapes).ok and follower_rows_check(gm, full, followers).ok
    attention = gm.get_submodule("model.layers.0.self_attn")
    attention.sinks = nn.Parameter(full["model.layers.0.self_attn.sinks"][[0, 2]])
    assert local_shape_check(gm, shapes).ok
    result = follower_rows_check(gm, full, followers)
    assert not result.ok and "model.layers.0.self_attn.sinks does not hold" in result.detail


def test_sinks_left_whole_fail_the_shape_check(monkeypatch):
    """A block that passed its sinks to the op without the follower hint: every rank keeps all 4,
    which the local shapes (and the op, given 2 query heads) refuse."""
    from stagebot.harness.suites.sharding_ir.blocks.sink_attention import SinkAttention
    from stagebot.harness.suites.sharding_ir.checks import hint_count, local_shape_check

    def unhinted(self, q, k, v):
        return sink_attention_op(q, k, v, self.sinks, self.scale, self.softcap, self.window)

    monkeypatch.setattr(SinkAttention, "core", unhinted)
    model, _, dc, gm = _sharded_granite_swa(1)
    assert hint_count(gm, "shard_like") == 0
    result = local_shape_check(gm, model.expected_local_shapes(dc))
    assert not result.ok and "model.layers.0.self_attn.sinks: (4,) != (2,)" in result.detail
    with pytest.raises(ValueError, match=r"\(4,\) sinks for 2 query heads"):
        gm(*_short_inputs(model))
