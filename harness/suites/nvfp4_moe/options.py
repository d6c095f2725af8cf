"""Command-line options of the NVFP4 MoE suite (registered by the project plugin)."""


def add_options(group) -> None:
    group.addoption(
        "--moe-backend",
        default=None,
        metavar="NAME",
        help="force every op to this backend (e.g. reference, cute); a case it cannot run fails "
        "the session instead of falling back.",
    )
    group.addoption(
        "--cute-tactic",
        default=None,
        metavar="NAME",
        help="run every cute case with this tactic of the dispatcher's list (as `bot kernels "
        "build --all-tactics` names them) instead of one picked per case by a hash of its id; "
        "cute refuses a case the tactic cannot take.",
    )
