"""The versioned JSON contracts: each schema, its example and the class that reads it."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from stagebot.bot.protocols.marker import ReplyMarker
from stagebot.harness.results import StageResult
from stagebot.stages.command import Command
from stagebot.stages.plan import MatrixEntry, Plan

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = {  # schema name -> (owner folder, class that reads it)
    "command": ("stages", Command),
    "reply_marker": ("bot", ReplyMarker),
    "plan": ("stages", Plan),
    "matrix_entry": ("stages", MatrixEntry),
    "stage_result": ("harness", StageResult),
}


def schema(name: str) -> dict:
    return json.loads((ROOT / CONTRACTS[name][0] / "schemas" / f"{name}.v1.json").read_text())


def example(name: str) -> dict:
    path = ROOT / CONTRACTS[name][0] / "schemas" / "examples" / f"{name}.v1.json"
    return json.loads(path.read_text())


def validate(name: str, data: dict) -> None:
    jsonschema.Draft202012Validator(schema(name)).validate(data)
