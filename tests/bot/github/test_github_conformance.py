"""The in-memory ``GitHubApi`` answers as the real adapter does.

Each scenario sets up a world with the calls both fakes share, then reports what the bot would see
through ``GitHubApi`` (and which error it would get). It runs against (a) ``PyGithubApi`` over the
HTTP fake (tests/github_server.py), the adapter the bot ships, and (b) ``MemoryGitHub``
(tests/helpers/memory_github.py), which the rule tests use; the two reports must be equal. Ids and
the server's address differ between the two by construction, so reports name them by the order
they were first seen and by ``<base>``. Negative controls: fakes with one planted drift each must
make at least one scenario differ, and the scenarios together must call every method of the
interface.
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from github_server import FakeGitHub, user_id
from helpers.memory_github import MemoryGitHub

from stagebot.bot.github import GitHubApi, GitHubError, PyGithubApi, RetryPolicy, Status

SHA = "a" * 40
PR = 7
FAST = RetryPolicy(
    attempts=1,
    backoff_base=0.001,
    secondary_rate_wait=0.001,
    seconds_between_requests=0,
    seconds_between_writes=0,
    timeout=60,  # only stops a hang: no scenario holds an answer back
)


class Side:
    """One implementation under test: its world (set-up calls), its ``GitHubApi``, and how a
    report names ids and addresses so that the two sides compare."""

    def __init__(self, world: Any, api: GitHubApi, base: str, tmp: Path) -> None:
        self.world, self.api, self.base, self.tmp = world, api, base, tmp
        self._refs: dict[int, str] = {}

    def ref(self, number: int | None) -> str | None:
        """An object's id as the order it was first reported in (the fakes number apart)."""
        if number is None:
            return None
        return self._refs.setdefault(number, f"#{len(self._refs) + 1}")

    def text(self, value: str) -> str:
        return value.replace(self.base, "<base>")

    def comment(self, comment) -> tuple:
        ref = self.ref(comment.id)
        url = self.text(comment.html_url).replace(str(comment.id), ref)
        return (ref, comment.author, comment.author_type, comment.body, url, comment.created_at)

    @staticmethod
    def id_of(made: Any) -> int:
        """The id of what a set-up call made (the HTTP fake returns GitHub's JSON)."""
        return made["id"] if isinstance(made, dict) else made.id

    def reactions(self, comment_id: int) -> list[str]:
        if isinstance(self.world, MemoryGitHub):
            return self.world.reactions_to(comment_id)
        return [r["content"] for r in self.world.reactions if r["comment_id"] == comment_id]

    def attempt(self, call: Callable[[], Any]) -> Any:
        """The call's answer, or the name of the error it raised."""
        try:
            return call()
        except (GitHubError, ValueError) as error:
            return f"raises {type(error).__name__}"


# ---------------------------------------------------------------- scenarios


def pulls_and_pushes(side: Side) -> list:
    w, api = side.world, side.api
    w.add_pull(PR, head_sha=SHA, labels=("ci-approved",), files=("a.py", "b/c.py"))
    w.add_pull(9, head_sha="b" * 40, author="outsider", fork=True)
    report: list = [side.text(repr(api.pull(PR))), side.text(repr(api.pull(9)))]
    report += [api.changed_files(PR)]
    w.push(PR, "c" * 40)
    report += [api.pull(PR).head_sha]
    w.push(PR, "d" * 40, force=True)
    report += [api.pull(PR).head_sha]
    w.label(PR, "ci-approved", "maint", remove=True)
    w.label(PR, "large", "maint")
    report += [api.pull(PR).labels]
    return report


def missing_objects(side: Side) -> list:
    w, api = side.world, side.api
    w.add_pull(PR, head_sha=SHA)
    calls = [
        lambda: api.pull(99),
        lambda: api.changed_files(99),
        lambda: api.create_comment(99, "hello"),
        lambda: api.edit_comment(424242, "x"),
        lambda: api.react(424242, "eyes"),
        lambda: api.compare_files("1" * 40, "2" * 40),
        lambda: api.workflow_run(424242),
        lambda: api.cancel_run(424242),
        lambda: api.run_artifacts(424242),
        lambda: api.download_artifact(424242, 1 << 20, side.tmp / "a.zip"),
        lambda: api.timeline(99),
        lambda: api.job_urls(424242),
        lambda: api.statuses("e" * 40, "stagebot"),
    ]
    return [side.attempt(call) for call in calls]


def permissions(side: Side) -> list:
    w, api = side.world, side.api
    for login, role in (("boss", "admin"), ("maint", "maintain"), ("tri", "triage")):
        w.grant(login, role)
    w.permissions["custom"] = ("write", "release-manager")
    report = []
    for login in ("boss", "maint", "tri", "custom", "stranger"):
        permission = api.permission(login)
        report.append((login, permission, permission.level, permission.at_least("write")))
    return report


def comments_and_reactions(side: Side) -> list:
    w, api = side.world, side.api
    w.add_pull(PR, head_sha=SHA)
    w.add_pull(8, head_sha=SHA)
    person = w.add_comment(PR, "/bot run", "writer", comment_id=555)
    w.add_comment(8, "elsewhere", "writer")
    mine = api.create_comment(PR, "PR_Github #1 …")
    api.edit_comment(mine.id, "PR_Github #1 edited")
    report: list = [side.comment(mine), [side.comment(c) for c in api.comments(PR)]]
    report.append(side.attempt(lambda: api.create_comment(PR, "x" * 65537)))
    report.append(side.attempt(lambda: api.edit_comment(mine.id, "x" * 65537)))
    api.react(555, "eyes")
    api.react(555, "eyes")  # GitHub keeps one reaction of a kind
    api.react(555, "confused")
    report.append(side.attempt(lambda: api.react(555, "thumbsup")))
    report.append(side.reactions(555))
    report.append(side.ref(side.id_of(person)))
    return report


def timeline(side: Side) -> list:
    w, api = side.world, side.api
    w.add_pull(PR, head_sha=SHA)
    w.add_comment(PR, "/bot run --sha aaaaaaaaaaaa", "writer", comment_id=555)
    w.label(PR, "ci-approved", "maint")
    w.push(PR, "c" * 40)
    w.label(PR, "ci-approved", "maint", remove=True)
    w.push(PR, "d" * 40, force=True)
    api.create_comment(PR, "a reply")
    events = api.timeline(PR)
    report: list = [(e.kind, e.actor, e.actor_id, e.label, side.ref(e.comment_id)) for e in events]
    assert ("labeled", "maint", user_id("maint"), "ci-approved", None) in report, report
    return report


def statuses(side: Side) -> list:
    w, api = side.world, side.api
    api.set_status(SHA, "pending", "stagebot", "PR_Github #1 is running", None)
    api.set_status(SHA, "failure", "stagebot", "x" * 200, "https://ci.example/1")
    api.set_status(SHA, "success", "other", "not ours", None)
    w.post_status(SHA, "error", "stagebot", "another job")
    report: list = [api.statuses(SHA, "stagebot"), api.statuses(SHA, "other")]
    report.append(api.statuses("f" * 40, "stagebot"))
    report.append(side.attempt(lambda: api.set_status(SHA, "done", "stagebot", "x", None)))
    report.append(len(api.statuses(SHA, "stagebot")))
    return report


def runs_and_jobs(side: Side) -> list:
    w, api = side.world, side.api
    w.add_stage_run(99, status="queued", pr=PR)
    w.add_stage_run(100, pr=PR)
    w.add_stage_run(98, status="completed", pr=PR)
    w.add_run(5)  # a bot.yml run
    w.add_job(80100, "CPU-PyTorch-1")
    w.add_job(80100, "CPU-PyTorch-2")

    def runs(found: list) -> list:
        return [side.text(repr(run)) for run in found]

    report: list = [runs(api.active_runs("stage.yml")), runs(api.active_runs("bot.yml"))]
    report.append(side.text(repr(api.workflow_run(80098))))
    report.append(api.workflow_run(80098).created_at[:2] == "20")  # it says when
    report.append({name: side.text(url) for name, url in api.job_urls(80100).items()})
    report.append(api.job_urls(80099))
    report += [api.cancel_run(80100), api.cancel_run(80100), api.cancel_run(80098)]
    report.append(api.workflow_run(80100).conclusion)
    report.append(runs(api.active_runs("stage.yml")))
    long_ago = "2000-01-01T00:00:00Z"
    report.append(runs(api.dispatched_runs("stage.yml", "stagebot-stage", long_ago)))
    for pipeline in range(200, 305):  # more than the 100 of one page
        w.add_stage_run(pipeline, pr=PR)
    everyone = api.dispatched_runs("stage.yml", "stagebot-stage", long_ago)
    report.append([run.id - 80000 for run in everyone])
    return report


def artifacts(side: Side) -> list:
    w, api = side.world, side.api
    w.add_run(3)
    w.add_run(4)
    first = w.add_artifact(50003, "ledger-1", {"ledger.sqlite": b"x" * 10})
    w.add_artifact(50003, "plan", {"plan.json": b"{}", "outputs.json": b"{}"})
    w.add_artifact(50003, "old", {"a": b"a"}, expired=True)
    w.add_artifact(50004, "other-run", {"a": b"a"})
    listed = api.run_artifacts(50003)
    report: list = [[(side.ref(a.id), a.name, a.expired, a.run_id) for a in listed]]
    report.append(all(a.size > 0 for a in listed))
    first_id = side.id_of(first)
    dest = side.tmp / "first.zip"
    api.download_artifact(first_id, 1 << 20, dest)
    with zipfile.ZipFile(io.BytesIO(dest.read_bytes())) as archive:
        report.append({name: archive.read(name) for name in archive.namelist()})
    report.append(side.attempt(lambda: api.download_artifact(first_id, 10, side.tmp / "x")))
    expired = next(a.id for a in listed if a.expired)
    report.append(side.attempt(lambda: api.download_artifact(expired, 1 << 20, side.tmp / "y")))
    report.append([a.name for a in api.run_artifacts(50004)])
    return report


def repository(side: Side) -> list:
    w, api = side.world, side.api
    w.diffs[("1" * 40, "2" * 40)] = ["a.py", "docs/x.md"]
    w.main_commits[:] = ["3" * 40, "2" * 40, "1" * 40]
    return [
        api.compare_files("1" * 40, "2" * 40),
        api.default_branch(),
        api.branch_commits("main", 2),
        api.branch_commits("main", 10),
        api.repository,
    ]


def dispatch(side: Side) -> list:
    api = side.api
    inputs = {
        "plan-run": "50101",
        "pipeline": "101",
        "key": f"pr-{PR}",
        "part": "1",
        "matrix": "[]",
    }
    run_id = api.dispatch_workflow("stage.yml", "stagebot-stage", inputs, lambda: None)
    run = api.workflow_run(run_id)
    report: list = [side.ref(run_id), (run.path, run.event, run.head_branch, run.status)]
    report.append(run.display_title)
    report.append([side.text(repr(r)) for r in api.active_runs("stage.yml")] != [])
    since = run.created_at
    report.append(
        [side.ref(r.id) for r in api.dispatched_runs("stage.yml", "stagebot-stage", since)]
    )
    report.append(api.dispatched_runs("stage.yml", "other-branch", since))
    report.append(api.dispatched_runs("bot.yml", "stagebot-stage", since))
    report.append(api.dispatched_runs("stage.yml", "stagebot-stage", "2999-01-01T00:00:00Z"))
    bad = {**inputs, "extra": "x"}
    report.append(side.attempt(lambda: api.dispatch_workflow("stage.yml", "x", bad, lambda: None)))
    missing = {k: v for k, v in inputs.items() if k != "key"}
    report.append(
        side.attempt(lambda: api.dispatch_workflow("stage.yml", "x", missing, lambda: None))
    )
    report.append(side.attempt(lambda: api.dispatch_workflow("nope.yml", "x", {}, lambda: None)))
    return report


SCENARIOS = [
    pulls_and_pushes,
    missing_objects,
    permissions,
    comments_and_reactions,
    timeline,
    statuses,
    runs_and_jobs,
    artifacts,
    repository,
    dispatch,
]


# ---------------------------------------------------------------- running a scenario on a side


def over_http(scenario: Callable[[Side], list], tmp: Path) -> list:
    with FakeGitHub() as server:
        api = PyGithubApi(server.url, server.repo, "ghs_test", FAST)
        return scenario(Side(server, api, server.base, tmp))


def in_memory(scenario: Callable[[Side], list], tmp: Path, fake: type = MemoryGitHub) -> list:
    world = fake()
    return scenario(Side(world, world, world.base, tmp))


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_the_memory_fake_answers_as_the_adapter_over_http(scenario, tmp_path) -> None:
    (tmp_path / "http").mkdir()
    (tmp_path / "memory").mkdir()
    expected = over_http(scenario, tmp_path / "http")
    assert in_memory(scenario, tmp_path / "memory") == expected


def test_the_scenarios_see_what_github_shows(tmp_path) -> None:
    """The HTTP side itself, spot-checked, so two equal reports are not two equal mistakes."""
    missing = over_http(missing_objects, tmp_path)
    assert missing[:10] == ["raises GitHubError"] * 10 and missing[10:] == [[], {}, []]
    (pending_and_failure, other, unknown, bad, count) = over_http(statuses, tmp_path)
    assert [s.state for s in pending_and_failure] == ["error", "failure", "pending"]
    assert pending_and_failure[1].description == "x" * 139 + "…"
    assert other == [Status("success", "not ours", "other", None)] and unknown == []
    assert (bad, count) == ("raises ValueError", 3)


# ---------------------------------------------------------------- negative controls


class ReactsTwice(MemoryGitHub):
    def react(self, comment_id: int, content: str) -> None:
        super().react(comment_id, content)
        self.reactions.append((comment_id, content))


class StatusesOldestFirst(MemoryGitHub):
    def statuses(self, sha: str, context: str) -> list[Status]:
        return list(reversed(super().statuses(sha, context)))


class LegacyPermissionOnly(MemoryGitHub):
    def permission(self, login: str):
        found = super().permission(login)
        return dataclasses.replace(found, role_name=found.permission)


class CancelsFinishedRuns(MemoryGitHub):
    def cancel_run(self, run_id: int) -> bool:
        super().cancel_run(run_id)
        return True


class KeyErrorForMissingPulls(MemoryGitHub):
    def _pull(self, number: int, what: str):
        return self.pulls[number]


class AllCommentsOfTheRepository(MemoryGitHub):
    def comments(self, number: int):
        return list(self.issue_comments.values())


class UntruncatedStatuses(MemoryGitHub):
    def set_status(self, sha, state, context, description, target_url) -> None:
        self.commit_statuses.setdefault(sha, []).append(
            Status(state, description, context, target_url)
        )


class UnvalidatedDispatch(MemoryGitHub):
    def dispatch_workflow(self, workflow, ref, inputs, recover) -> int:
        return super().dispatch_workflow(workflow, ref, {}, recover)


MUTANTS = [
    ReactsTwice,
    StatusesOldestFirst,
    LegacyPermissionOnly,
    CancelsFinishedRuns,
    KeyErrorForMissingPulls,
    AllCommentsOfTheRepository,
    UntruncatedStatuses,
    UnvalidatedDispatch,
]


@pytest.fixture(scope="module")
def http_reports(tmp_path_factory) -> dict[str, list]:
    return {s.__name__: over_http(s, tmp_path_factory.mktemp(s.__name__)) for s in SCENARIOS}


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.__name__)
def test_a_fake_with_a_planted_drift_fails_a_scenario(mutant, http_reports, tmp_path) -> None:
    differing = []
    for scenario in SCENARIOS:
        try:
            report = in_memory(scenario, tmp_path, mutant)
        except Exception as error:  # a drift may also crash the scenario
            report = [f"crashed: {type(error).__name__}"]
        if report != http_reports[scenario.__name__]:
            differing.append(scenario.__name__)
    assert differing, f"{mutant.__name__} answers like the adapter in every scenario"


def test_the_scenarios_call_every_method_of_the_interface(tmp_path) -> None:
    methods = {
        name for name, _ in inspect.getmembers(GitHubApi, inspect.isfunction) if name[0] != "_"
    }
    called: set[str] = set()
    for scenario in SCENARIOS:
        world = MemoryGitHub()
        scenario(Side(world, world, world.base, tmp_path))
        called |= set(world.calls)
    assert methods - called == set()


def test_the_memory_fake_has_the_interfaces_signatures() -> None:
    for name, member in inspect.getmembers(GitHubApi, inspect.isfunction):
        if name.startswith("_"):
            continue
        assert inspect.signature(getattr(MemoryGitHub, name)) == inspect.signature(member), name
