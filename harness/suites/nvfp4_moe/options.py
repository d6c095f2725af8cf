"""Command-line options of the NVFP4 MoE suite (registered by the project plugin)."""


def add_options(group) -> None:
    group.addoption(
        "--moe-backend",
        default=None,
        metavar="NAME",
        help="force every op to this backend (e.g. reference, cute); a case it cannot run fails "
        "the session instead of falling back.",
    )
