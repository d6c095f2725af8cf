"""DistConfig: the rank -> (tp, ep) mapping of each named config, expert shares, and bad configs."""

from __future__ import annotations

import pytest

from stagebot.harness.suites.sharding_ir.dist_config import DistConfig
from stagebot.harness.suites.sharding_ir.errors import ShardingIRError
from stagebot.stages.errors import StagebotError


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # rank -> (tp_rank, moe_ep_rank, moe_tp_rank)
        pytest.param("tep", [(0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 1, 1)], id="tep"),
        pytest.param("tp-only", [(0, 0, 0), (1, 0, 1)], id="tp-only"),
        pytest.param("ep-only", [(0, 0, 0), (1, 1, 0)], id="ep-only"),
    ],
)
def test_rank_mapping(name, expected):
    world_size = len(expected)
    for rank, ranks in enumerate(expected):
        dc = DistConfig.named(name, rank)
        assert (dc.world_size, dc.tp_size) == (world_size, world_size)
        assert (dc.tp_rank, dc.moe_ep_rank, dc.moe_tp_rank) == ranks
        assert dc.moe_tp * dc.moe_ep == dc.tp_size


@pytest.mark.parametrize(
    ("num_experts", "moe_ep", "expected"),
    [
        pytest.param(8, 2, [range(0, 4), range(4, 8)], id="even"),
        pytest.param(5, 2, [range(0, 2), range(2, 5)], id="remainder on last rank"),
        pytest.param(
            6, 4, [range(0, 1), range(1, 2), range(2, 3), range(3, 6)], id="remainder of 3"
        ),
    ],
)
def test_local_experts(num_experts, moe_ep, expected):
    got = [
        DistConfig(world_size=moe_ep, rank=r, moe_tp=1, moe_ep=moe_ep).local_experts(num_experts)
        for r in range(moe_ep)
    ]
    assert got == expected


def test_expected_experts_are_a_literal_table_not_the_sharders():
    """The structural check's expectation, against literals (not against DistConfig)."""
    from stagebot.harness.suites.sharding_ir.blocks.moe import expected_local_experts

    table = {r: list(expected_local_experts(5, 2, r)) for r in range(2)}
    assert table == {0: [0, 1], 1: [2, 3, 4]}
    assert {r: list(expected_local_experts(8, 2, r)) for r in range(2)} == {
        0: [0, 1, 2, 3],
        1: [4, 5, 6, 7],
    }


def test_moe_model_expects_the_remainder_on_the_last_ep_rank():
    """5 experts on tep: ranks 0 and 2 (ep 0) keep experts 0-1, ranks 1 and 3 (ep 1) keep 2-4."""
    from stagebot.harness.suites.sharding_ir.build import build_ir_model
    from stagebot.harness.suites.sharding_ir.registry import REGISTRY

    model = build_ir_model(REGISTRY["Qwen/Qwen3-30B-A3B"], {"num_experts": 5})
    for rank, kept in {0: [0, 1], 1: [2, 3, 4], 2: [0, 1], 3: [2, 3, 4]}.items():
        shapes = model.expected_local_shapes(DistConfig.named("tep", rank))
        experts = {
            int(k.split(".")[5])
            for k, shape in shapes.items()
            if k.startswith("model.layers.1.mlp.experts.") and shape is not None
        }
        assert sorted(experts) == kept, rank


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param(
            dict(world_size=4, rank=0, moe_tp=2, moe_ep=1),
            r"moe_tp \(2\) x moe_ep \(1\)",
            id="product",
        ),
        pytest.param(
            dict(world_size=2, rank=2, moe_tp=2, moe_ep=1), r"rank 2 is outside 0..1", id="rank"
        ),
        pytest.param(
            dict(world_size=0, rank=0, moe_tp=1, moe_ep=1), r"world_size must be >= 1", id="world"
        ),
    ],
)
def test_bad_config_is_a_user_error(kwargs, message):
    with pytest.raises(ShardingIRError, match=message) as info:
        DistConfig(**kwargs)
    assert isinstance(info.value, StagebotError) and isinstance(info.value, ValueError)


def test_unknown_name_suggests_the_closest():
    with pytest.raises(
        ShardingIRError, match=r"unknown dist config 'tp_only'.*Did you mean 'tp-only'"
    ):
        DistConfig.named("tp_only")


def test_too_few_experts_for_ep():
    with pytest.raises(ShardingIRError, match=r"cannot split 1 experts over EP size 2"):
        DistConfig.named("ep-only").local_experts(1)
