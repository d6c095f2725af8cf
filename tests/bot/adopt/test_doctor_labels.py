"""The promise of `bot doctor`'s runners check, stated as a property over label sets (issue 50):
a GPU type whose jobs run on self-hosted runners is served only by an online runner that carries
every one of its jobs' labels (GitHub gives a job to a runner with all of the job's labels;
extra labels on the runner do not matter); GitHub-hosted types need no runner."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from stagebot.bot.adopt.doctor_checks import Context, runners
from stagebot.bot.adopt.doctor_client import Answer
from stagebot.bot.config import BotConfig

LABELS = st.frozensets(st.sampled_from(["self-hosted", "linux", "h200", "x64", "gpu"]))
# GitHub says online or offline; any other status serves no more than offline does
STATUS = st.sampled_from(["online", "offline"]) | st.text(max_size=8)
RUNNER = st.tuples(LABELS, STATUS)


class Runners:
    """A DoctorClient that lists ``registered`` as the repository's runners."""

    def __init__(self, registered: list[tuple[frozenset[str], str]]):
        self.registered = registered

    def get(self, path: str, **query: str) -> Answer:
        assert path == "/actions/runners", path
        listed = [
            {"id": index, "status": status, "labels": [{"name": name} for name in sorted(labels)]}
            for index, (labels, status) in enumerate(self.registered)
        ]
        return Answer(200, {"total_count": len(listed), "runners": listed}, {})


def context(registered, runner_labels: dict[str, tuple[str, ...]]) -> Context:
    """What the runners check reads: the runners GitHub lists and each GPU type's labels."""
    return Context(
        root=Path("."),
        settings=None,
        config=BotConfig(),
        catalog=None,
        runner_labels=runner_labels,
        client=Runners(registered),
        app=None,
        without_app=True,
    )


def served(labels: frozenset[str], registered) -> bool:
    if "self-hosted" not in labels:
        return True
    return any(labels <= carried and status == "online" for carried, status in registered)


@settings(max_examples=200, deadline=None)
@given(
    types=st.dictionaries(st.sampled_from(["H200", "H100", "CPU"]), LABELS, max_size=3),
    registered=st.lists(RUNNER, max_size=4),
)
def test_a_gpu_type_is_served_only_by_an_online_runner_with_all_its_labels(types, registered):
    runner_labels = {name: tuple(sorted(labels)) for name, labels in types.items()}
    check = runners(context(registered, runner_labels))
    unserved = [name for name, labels in types.items() if not served(labels, registered)]
    assert check.ok == (not unserved), check.detail
    for name in unserved:
        assert f"{name} (" in check.detail


def test_a_runner_missing_one_label_serves_nothing() -> None:
    wanted = ("self-hosted", "linux", "h200")
    ctx = context([(frozenset({"self-hosted", "linux"}), "online")], {"H200": wanted})
    assert not runners(ctx).ok
