"""Command-line options of the sharding-IR equivalence suite (registered by the project plugin)."""

from stagebot.harness.suites.sharding_ir.dist_config import NAMED_CONFIGS  # no torch: stays light

GLOO_DTYPES = ("fp32", "bf16")  # what the sharded checks compute in on gloo; NCCL: bf16


def add_options(group) -> None:
    group.addoption(
        "--sharding-ir-model-id",
        action="append",
        default=[],
        metavar="HF_ID|all",
        help="HF model id to check (repeatable), or 'all' for every registered id; "
        "absent: the equivalence tests skip.",
    )
    group.addoption(
        "--sharding-ir-dist-config",
        action="append",
        default=[],
        choices=tuple(NAMED_CONFIGS),
        help="distributed config to check (repeatable; default: tep).",
    )
    group.addoption(
        "--sharding-ir-rank-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="seconds the ranks of one case may run once started (default: 20 x their measured "
        "start-up, at least 300 s); a limit that runs out fails the case with a SpawnTimeout "
        "that says how long it ran and the load average.",
    )
    group.addoption(
        "--sharding-ir-gloo-dtype",
        default="fp32",
        choices=GLOO_DTYPES,
        help="dtype of the sharded checks on gloo, the CPU (default fp32; bf16: with NCCL's "
        "tolerance, as the GPU stages run them, to see on a CPU what a GPU run would).",
    )
