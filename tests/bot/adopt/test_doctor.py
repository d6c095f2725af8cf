"""`bot doctor` against the fake GitHub (real PyGithub): the sample repository, adopted with
`bot init` and set up as docs/adopt.md says, passes every check; each misconfiguration fails
exactly its own check, with its fix, and the exit status says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from github_server import FakeGitHub
from helpers.adoption import adopted  # noqa: F401 - fixture
from helpers.app_keys import APP_ID, app_key
from helpers.cli import bot

from stagebot.bot.adopt.doctor_checks import APP_PERMISSIONS

WORKFLOWS = ("bot.yml", "stage.yml", "report.yml")
GPU_LABELS = ["self-hosted", "linux", "ephemeral", "gpu-dgx-h200"]


@pytest.fixture(scope="module")
def keys() -> tuple[str, bytes]:
    return app_key()


def set_up(gh: FakeGitHub, repo: Path) -> None:
    """The repository as docs/adopt.md leaves it: every check passes."""
    files = {
        f".github/workflows/{name}": (repo / ".github/workflows" / name).read_text()
        for name in WORKFLOWS
    }
    gh.branch_files["main"] = dict(files)
    gh.branch_files["stagebot-stage"] = dict(files)
    gh.branch_rules["stagebot-stage"] = [
        {"type": "update", "ruleset_id": 1},
        {"type": "deletion", "ruleset_id": 1},
    ]
    gh.branch_rules["main"] = [
        {
            "type": "required_status_checks",
            "ruleset_id": 2,
            "parameters": {"required_status_checks": [{"context": "stagebot"}]},
        }
    ]
    gh.add_runner("h200-1", GPU_LABELS)
    gh.default_workflow_permissions = "read"
    gh.fork_approval_policy = "all_external_contributors"
    gh.app["permissions"] = dict(APP_PERMISSIONS)


@pytest.fixture
def gh(keys, adopted, monkeypatch):  # noqa: F811 - the fixture imported above
    with FakeGitHub() as server:
        server.add_app(APP_ID, "stagebot-app", keys[1])
        set_up(server, adopted)
        for key, value in {
            "GITHUB_REPOSITORY": server.repo,
            "GITHUB_API_URL": server.url,
            "GITHUB_TOKEN": "ghp_admin",
            "STAGEBOT_APP_ID": str(APP_ID),
            "STAGEBOT_APP_PRIVATE_KEY": keys[0],
            "STAGEBOT_GITHUB_THROTTLE_S": "0",  # PyGithub's 0.25 s between reads is for GitHub
        }.items():
            monkeypatch.setenv(key, value)
        yield server


def doctor(capsys, repo: Path, *args: str) -> tuple[int, dict[str, dict]]:
    code, out, err = bot(capsys, "doctor", "--root", str(repo), "--json", *args)
    assert err == "", err
    return code, {check["name"]: check for check in json.loads(out)}


def test_a_correctly_set_up_repository_passes_every_check(gh, adopted, capsys) -> None:  # noqa: F811
    code, checks = doctor(capsys, adopted)
    assert [name for name, check in checks.items() if not check["ok"]] == []
    assert code == 0
    assert len(checks) == 12
    code, out, _ = bot(capsys, "doctor", "--root", str(adopted))
    assert code == 0 and "12 of 12 checks pass" in out, out


def _stage_workflow_edited(gh: FakeGitHub) -> None:
    path = ".github/workflows/stage.yml"
    gh.branch_files["stagebot-stage"][path] += "# runs-on: [self-hosted, anything]\n"


def _another_version(gh: FakeGitHub) -> None:
    for branch in ("main", "stagebot-stage"):
        for path, text in gh.branch_files[branch].items():
            gh.branch_files[branch][path] = text.replace("(stagebot 0.1.0)", "(stagebot 0.0.9)")


MISCONFIGURATIONS = [
    pytest.param(
        lambda gh: gh.branch_rules.pop("stagebot-stage"),
        "stage-ruleset",
        "'Restrict updates' and 'Restrict deletions'",
        id="no ruleset on the stage branch",
    ),
    pytest.param(
        lambda gh: gh.branch_rules["stagebot-stage"].pop(1),
        "stage-ruleset",
        "'Restrict updates' and 'Restrict deletions'",
        id="the stage branch may be deleted",
    ),
    pytest.param(
        _stage_workflow_edited,
        "stage-branch",
        "git push origin main:stagebot-stage",
        id="the stage branch's stage workflow differs from the default branch's",
    ),
    pytest.param(
        lambda gh: gh.branch_files.pop("stagebot-stage"),
        "stage-branch",
        "git push origin main:stagebot-stage",
        id="no stage branch",
    ),
    pytest.param(
        lambda gh: gh.runners.clear(),
        "runners",
        "register ephemeral (just-in-time) runners with exactly these labels",
        id="a catalog label with no runner",
    ),
    pytest.param(
        lambda gh: gh.runners[0].update(status="offline"),
        "runners",
        "register ephemeral (just-in-time) runners",
        id="the label's only runner is offline",
    ),
    pytest.param(
        lambda gh: gh.app["permissions"].update(contents="write"),
        "app",
        "App settings > Permissions: exactly actions: write, contents: read",
        id="an App with contents write where read suffices",
    ),
    pytest.param(
        lambda gh: gh.app["permissions"].pop("statuses"),
        "app",
        "App settings > Permissions",
        id="an App without statuses write",
    ),
    pytest.param(
        lambda gh: setattr(gh, "default_workflow_permissions", "write"),
        "workflow-permissions",
        "'Read repository contents and packages permissions'",
        id="default workflow permissions read-write",
    ),
    pytest.param(
        lambda gh: setattr(gh, "fork_approval_policy", "first_time_contributors"),
        "fork-approval",
        "'Require approval for all external contributors'",
        id="fork PR workflows not gated for every outside contributor",
    ),
    pytest.param(
        lambda gh: gh.branch_rules.pop("main"),
        "required-status",
        "require the status check 'stagebot' on main",
        id="the status is not required",
    ),
    pytest.param(
        _another_version,
        "workflows",
        "with stagebot 0.1.0: `bot init --write`",
        id="workflows from another stagebot version",
    ),
    pytest.param(
        lambda gh: gh.branch_files["main"].pop(".github/workflows/bot.yml"),
        "workflows",
        "`bot init --write`",
        id="a workflow missing on the default branch",
    ),
]


@pytest.mark.parametrize(("break_it", "failing", "fix"), MISCONFIGURATIONS)
def test_each_misconfiguration_fails_its_check_with_the_fix(
    gh,
    adopted,  # noqa: F811
    capsys,
    break_it,
    failing,
    fix,
) -> None:
    break_it(gh)
    code, checks = doctor(capsys, adopted)
    assert code == 1
    assert [name for name, check in checks.items() if not check["ok"]] == [failing]
    assert fix in checks[failing]["fix"], checks[failing]
    code, out, _ = bot(capsys, "doctor", "--root", str(adopted))
    failed = out[out.index(f"FAIL {failing}: ") :].splitlines()
    assert code == 1 and failed[1].startswith("     fix: ") and fix in failed[1], out


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        (
            {"administration": "write"},
            "granted but not needed: administration: write",
        ),
        ({"statuses": None}, "needed: statuses: write"),
        (
            {"contents": "write", "issues": "read"},
            "granted but not needed: contents: write, issues: read; "
            "needed: contents: read, issues: write",
        ),
    ],
    ids=["one too many", "one missing", "two different"],
)
def test_the_app_check_names_each_permission_too_many_and_each_missing(
    gh,
    adopted,  # noqa: F811
    capsys,
    change,
    detail,
) -> None:
    permissions = gh.app["permissions"]
    for name, level in change.items():
        if level is None:
            permissions.pop(name)
        else:
            permissions[name] = level
    code, checks = doctor(capsys, adopted)
    assert code == 1 and checks["app"]["detail"] == detail, checks["app"]


def test_a_protected_branchs_required_check_counts_too(gh, adopted, capsys) -> None:  # noqa: F811
    gh.branch_rules.pop("main")
    gh.protected_contexts["main"] = ["stagebot"]
    code, checks = doctor(capsys, adopted)
    assert code == 0 and checks["required-status"]["ok"], checks["required-status"]


def test_doctor_takes_the_github_settings_from_the_environment(
    gh,
    adopted,  # noqa: F811
    capsys,
    monkeypatch,
) -> None:
    """As every command does: STAGEBOT_GITHUB_THROTTLE_S=0 (the fixture's) leaves PyGithub
    nothing to wait between reads; without it, PyGithub's throttle for GitHub spaces them."""
    import github.Requester

    waits: list[float] = []
    # PyGithub's requester waits with its module's time.sleep (actionlint's subprocess too, with
    # its own)
    monkeypatch.setattr(github.Requester, "time", _Clock(waits))
    assert doctor(capsys, adopted)[0] == 0
    assert waits == []
    monkeypatch.delenv("STAGEBOT_GITHUB_THROTTLE_S")
    assert doctor(capsys, adopted)[0] == 0
    assert waits and all(0 < wait <= 0.25 for wait in waits), waits


class _Clock:
    """``time`` as PyGithub's requester sees it, its sleeps recorded instead of slept."""

    def __init__(self, waits: list[float]) -> None:
        self.sleep = waits.append

    def __getattr__(self, name: str):
        import time

        return getattr(time, name)


def test_without_an_app_doctor_asks_for_one_unless_told(gh, adopted, capsys, monkeypatch) -> None:  # noqa: F811
    monkeypatch.delenv("STAGEBOT_APP_ID")
    code, checks = doctor(capsys, adopted)
    assert code == 1 and "SECURITY.md, threat 13" in checks["app"]["detail"]
    code, checks = doctor(capsys, adopted, "--without-app")
    assert code == 0 and checks["app"]["ok"]
