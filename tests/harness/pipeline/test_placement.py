"""Whether a host can run a shard (harness/run/placement.py): one answer for the local
executor (slots its catalog maps) and a CI stage job (the matrix entry's device patterns)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from stagebot.harness.run.gpus import Device
from stagebot.harness.run.placement import is_split, missing_hardware, serving
from stagebot.stages.plan import MatrixEntry

EXAMPLE = Path(__file__).resolve().parents[3] / "stages/schemas/examples/matrix_entry.v1.json"
ENTRY = replace(
    MatrixEntry.from_json(json.loads(EXAMPLE.read_text())),
    gpu_type="DGX_H200",
    gpu_count=2,
    device_names=["NVIDIA H200*"],
)
HOST = "2 x NVIDIA H200"


@pytest.mark.parametrize(
    ("entry", "have", "nodes", "why"),
    [
        pytest.param(ENTRY, 2, 1, None, id="enough GPUs"),
        pytest.param(ENTRY, 1, 1, "needs 2 x DGX_H200 GPU(s); this host has 1 of", id="too few"),
        pytest.param(ENTRY, 0, 1, "this host has none of that type (2 x", id="none"),
        pytest.param(ENTRY, 4, 2, "needs 2 nodes; this executor runs on one host", id="2 nodes"),
        pytest.param(replace(ENTRY, gpu_count=0), 1, 1, None, id="a CPU slot"),
        pytest.param(replace(ENTRY, gpu_count=0), 0, 1, "no CPU slot", id="no CPU slot"),
        pytest.param(
            replace(ENTRY, device_names=[]), 0, 1, "no device-name pattern", id="no pattern"
        ),
    ],
)
def test_missing_hardware(entry, have, nodes, why) -> None:
    found = missing_hardware(entry, have, HOST, nodes)
    assert found is None if why is None else why in found


def test_a_stage_job_counts_the_gpus_its_entry_names() -> None:
    names = ("NVIDIA H200", "NVIDIA A10", "NVIDIA H200 NVL")
    devices = [Device(str(index), name) for index, name in enumerate(names)]
    assert serving(ENTRY, devices) == ["0", "2"]
    assert serving(replace(ENTRY, device_names=[]), devices) == []


@pytest.mark.parametrize(
    ("changes", "split"),
    [
        pytest.param({"shards": 2, "command": None, "tests": []}, True, id="a family's shard"),
        pytest.param({"shards": 1, "command": None, "tests": []}, False, id="one shard"),
        pytest.param({"shards": 2, "command": "make", "tests": []}, False, id="a command"),
        pytest.param({"shards": 2, "command": None, "tests": ["t.py::a"]}, False, id="its share"),
    ],
)
def test_only_an_unsplit_family_shard_is_split(changes, split) -> None:
    assert is_split(replace(ENTRY, **changes)) is split
