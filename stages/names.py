"""Test stage names: ``<GPU>[-<N>_GPUs][-<M>_Nodes]-<Backend>[-<Tag>…][-Post-Merge][-<k>]``.

The GPU token is the first one (what ``--gpu-type`` matches); ``N_GPUs`` absent means one GPU
(``CPU`` means none); ``k`` is the shard index. Family names are stage names without ``-<k>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Name token -> the value `--test-backend` uses.
BACKENDS = {
    "PyTorch": "pytorch",
    "CPP": "cpp",
    "TensorRT": "tensorrt",
    "Triton": "triton",
    "AutoDeploy": "autodeploy",
    "Python": "python",  # the neutral word: a repository's tests that use none of the above
}
TOKEN = re.compile(r"^[A-Za-z0-9_]+$")
GPUS = re.compile(r"^(?P<n>[1-9][0-9]*)_GPUs$")
NODES = re.compile(r"^(?P<m>[1-9][0-9]*)_Nodes$")
SHARD = re.compile(r"^[1-9][0-9]*$")


@dataclass(frozen=True)
class TestStageName:
    gpu_type: str
    gpu_count: int
    nodes: int
    backend: str  # the --test-backend value, e.g. "pytorch"
    tags: tuple[str, ...]
    post_merge: bool
    shard: int | None  # None for a family name


def parse_test_stage_name(name: str, *, with_shard: bool) -> TestStageName:
    """Split a test stage (or family) name into its parts; ValueError says what is wrong."""
    tokens = name.split("-")
    shard = None
    if with_shard:
        if len(tokens) < 2 or not SHARD.match(tokens[-1]):
            raise ValueError(f"{name!r} does not end in a shard index like '-1'")
        shard = int(tokens.pop())
    if not all(TOKEN.match(token) for token in tokens):
        raise ValueError(f"{name!r} has an empty or invalid part (letters, digits and _ only)")
    gpu_type, rest = tokens[0], tokens[1:]
    gpu_count, nodes = (0 if gpu_type == "CPU" else 1), 1
    if rest and GPUS.match(rest[0]):
        gpu_count = int(GPUS.match(rest.pop(0))["n"])
    if rest and NODES.match(rest[0]):
        nodes = int(NODES.match(rest.pop(0))["m"])
    if not rest or rest[0] not in BACKENDS:
        raise ValueError(
            f"{name!r} has no backend after the GPU part (expected one of {', '.join(BACKENDS)})"
        )
    backend = BACKENDS[rest.pop(0)]
    post_merge = len(rest) >= 2 and rest[-2:] == ["Post", "Merge"]
    tags = tuple(rest[:-2] if post_merge else rest)
    return TestStageName(gpu_type, gpu_count, nodes, backend, tags, post_merge, shard)


def test_stage_name(family: str, shard: int) -> str:
    return f"{family}-{shard}"


_SHARD_SUFFIX = re.compile(r"-[1-9][0-9]*$")


def stage_family(stage: str) -> str:
    """``CPU-PyTorch-2`` -> ``CPU-PyTorch``: a shard's family (the same tests on the same
    hardware and backend; what a test's base outcome is compared within)."""
    return _SHARD_SUFFIX.sub("", stage)
