"""Command-line options of the sharding-IR equivalence suite (registered by the project plugin)."""

from stagebot.harness.suites.sharding_ir.dist_config import NAMED_CONFIGS  # no torch: stays light


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
