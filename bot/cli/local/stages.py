"""`bot stages`: list the catalog, describe one stage, or map a test id to the stages that run it.

The test -> stage mapping works on path / node-id prefixes (no pytest collection), so it is fast.
"""

from __future__ import annotations

from pathlib import Path

import click

from stagebot.bot.cli.options import local_catalog_option
from stagebot.stages.catalog import Catalog, Stage, load_catalog
from stagebot.stages.errors import PlanError, StagebotError
from stagebot.stages.planner import STAGE_LISTING
from stagebot.stages.suggest import unknown


@click.command()
@local_catalog_option
@click.option("--list", "list_all", is_flag=True, help="List every stage (the default).")
@click.option("--stage", "stage_name", metavar="NAME", help="Describe one stage.")
@click.option("--test", "test_id", metavar="ID", help="Which stages run this test id or path.")
@click.option(
    "--ledger",
    type=click.Path(path_type=Path),
    default=None,
    help="With --test: show the test's recent history on main from this ledger; with --cost: "
    "sum its pipelines (default: the repository's, as `bot run` uses it, when it exists).",
)
@click.option("--branch", default="main", show_default=True, help="The history's branch.")
@click.option(
    "--explain-reuse",
    "explain_id",
    metavar="ID",
    help="Whether this test's latest run (in --ledger) would be reused by dependency key on "
    "this checkout, and which input changed (docs/reuse.md).",
)
@click.option(
    "--cost",
    is_flag=True,
    help="The GPU-minutes --branch's pipelines (in --ledger) ran, reused and cancelled by "
    "fail-fast, per day and GPU type.",
)
def stages(
    catalog,
    list_all: bool,
    stage_name: str | None,
    test_id: str | None,
    ledger,
    branch,
    explain_id: str | None,
    cost: bool,
) -> None:
    """Show the stage catalog: every stage (the default, or --list), one (--stage), the
    stages that run a test (--test), why a test would or would not be reused by key
    (--explain-reuse), or what the branch's pipelines cost in GPU time (--cost)."""
    options = (
        ("--list", list_all),
        ("--stage", stage_name),
        ("--test", test_id),
        ("--explain-reuse", explain_id),
        ("--cost", cost),
    )
    given = [flag for flag, value in options if value]
    if len(given) > 1:
        raise click.UsageError(
            f"give one of --list, --stage NAME, --test ID, --explain-reuse ID, --cost (got {given})"
        )
    if cost:
        click.echo(_cost(ledger, branch))
        return
    loaded = load_catalog(catalog)
    if explain_id:
        click.echo(_explain(loaded, ledger, _repository_relative(explain_id)))
    elif stage_name:
        click.echo(_describe(loaded, _find_stage(loaded, stage_name)))
    elif test_id:
        test_id = _repository_relative(test_id)
        click.echo(_stages_for_test(loaded, test_id))
        history = _history(ledger, branch, test_id)
        if history:
            click.echo(history)
    else:
        click.echo(_table(loaded.stages))


def _cost(ledger: Path | None, branch: str) -> str:
    """The running total of GPU-minutes per day and GPU type on ``branch``, oldest day first."""
    from stagebot.harness.ledger.book import Ledger
    from stagebot.harness.ledger.location import default_ledger
    from stagebot.harness.pipeline.worktree import repository_root

    if ledger is None:
        ledger = default_ledger(repository_root(Path.cwd()))
    if not Path(ledger).is_file():
        raise StagebotError(
            f"no ledger at {ledger}: give --ledger PATH (the one `bot run` records in)"
        )
    with Ledger.open(ledger, readonly=True) as book:
        sums = book.gpu_minutes_by_day(branch)
    title = f"GPU-minutes of the finished pipelines on {branch} ({ledger}):"
    if not sums:
        return f"{title} none recorded"
    lines = [title, f"{'day':<10}  {'GPU type':<12} {'run':>9} {'reused':>9} {'cancelled':>9}"]
    for (day, gpu_type), figures in sorted(sums.items()):
        run, reused, cancelled = (figures.get(name, 0.0) for name in ("run", "reused", "cancelled"))
        lines.append(f"{day:<10}  {gpu_type:<12} {run:>9.1f} {reused:>9.1f} {cancelled:>9.1f}")
    return "\n".join(lines)


def _explain(catalog: Catalog, ledger: Path | None, test_id: str) -> str:
    from stagebot.harness.ledger.book import Ledger
    from stagebot.harness.ledger.location import default_ledger
    from stagebot.harness.pipeline.worktree import repository_root
    from stagebot.harness.reuse.explain import explain_reuse

    root = repository_root(Path.cwd())
    ledger = ledger or default_ledger(root)
    with Ledger.open(ledger, readonly=True) as book:
        return "\n".join(explain_reuse(book, test_id, root, catalog))


def _repository_relative(test_id: str) -> str:
    """``./path`` or an absolute path inside the repository as the catalog writes suite paths
    (from the repository root), node id kept: ``/repo/tests/a.py::t`` -> ``tests/a.py::t``."""
    from stagebot.harness.pipeline.worktree import repository_root

    path, sep, node = test_id.partition("::")
    root = repository_root(Path.cwd())
    given = Path(path)
    if given.is_absolute() or path.startswith(("./", "../")):
        absolute = (Path.cwd() / given).resolve()
        try:
            path = absolute.relative_to(root.resolve()).as_posix()
        except ValueError:
            raise PlanError(
                f"{test_id!r} is outside the repository {root}; give a path inside it"
            ) from None
    return path + sep + node


def _table(stages: tuple[Stage, ...]) -> str:
    rows = [("STAGE", "KIND", "GPU", "GPUS", "NODES", "BACKEND", "PHASE", "TIMEOUT")]
    rows += [
        (
            s.name,
            s.kind,
            s.gpu_type,
            str(s.gpu_count),
            str(s.nodes),
            s.backend or "-",
            s.phase,
            f"{s.timeout_minutes}m",
        )
        for s in stages
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in rows
    )


def _find_stage(catalog: Catalog, name: str) -> Stage:
    stage = catalog.stage(name)
    if stage is None:
        names = [s.name for s in catalog.stages]
        raise PlanError(unknown("stage", name, names, listing=STAGE_LISTING))
    return stage


def _describe(catalog: Catalog, stage: Stage) -> str:
    family = stage.family
    lines = [
        f"{stage.name}  (shard {stage.shard} of {family.shards} of {family.name}, {family.source})",
        f"  kind: {family.kind}   phase: {family.phase}   timeout: {family.timeout_minutes} min",
        f"  GPUs: {family.gpu_count} x {family.gpu_type} on {family.nodes} node(s)"
        f"   runner labels: {', '.join(catalog.gpu_types[family.gpu_type].runner_labels)}",
    ]
    if family.backend:
        lines.append(f"  backend: {family.backend}   tags: {', '.join(family.tags) or '-'}")
    lines += [
        f"  suite: pytest {' '.join(suite.pytest_args())}"
        + (f"  (stagebot's built-in {suite.builtin})" if suite.builtin else "")
        for suite in family.suites
    ]
    if family.kind == "test":
        lines.append(
            f"  reruns: a failed test up to {family.max_reruns}x, when at most "
            f"{family.rerun_max_failures} failed"
            if family.max_reruns
            else "  reruns: none"
        )
    if family.command:
        lines.append(f"  command: {family.command}")
    lines += [f"  installs: {command}" for command in family.setup.commands()]  # its job's
    for rule in ("run_if_changed", "skip_if_only_changed"):
        if getattr(family, rule):
            lines.append(f"  {rule}: {', '.join(getattr(family, rule))}")
    lines += [f"  waived: {w.test_id} ({w.reason})" for w in catalog.waives_for(family.gpu_type)]
    return "\n".join(lines)


def _covers(suite_path: str, test_id: str) -> bool:
    """A suite runs a test when one names a path or node id under the other."""
    outer, inner = sorted((suite_path.rstrip("/"), test_id.rstrip("/")), key=len)
    return inner == outer or inner.startswith((outer + "/", outer + "::"))


def _stages_for_test(catalog: Catalog, test_id: str) -> str:
    lines = []
    for stage in catalog.stages:
        for suite in stage.suites:
            if _covers(suite.path, test_id):
                filters = " ".join(suite.pytest_args()[1:])
                lines.append(
                    f"{stage.name}" + (f"  (pytest {suite.path} {filters})" if filters else "")
                )
    if not lines:
        paths = sorted({suite.path for stage in catalog.stages for suite in stage.suites})
        raise PlanError(f"no stage runs {test_id!r}; the suites are: {', '.join(paths)}")
    waived = [w for w in catalog.waives if _covers(w.test_id, test_id)]
    lines += [f"waived: {w.test_id} on {w.gpu_type or 'every GPU'} ({w.reason})" for w in waived]
    return "\n".join(lines)


def _history(ledger: Path | None, branch: str, test_id: str) -> str | None:
    """The test's outcomes in the latest pipelines on ``branch``, and where it was flaky."""
    from stagebot.harness.analysis.flakiness import flaky_history
    from stagebot.harness.ledger.book import Ledger
    from stagebot.harness.ledger.location import default_ledger
    from stagebot.harness.ledger.tests import HISTORY_PIPELINES
    from stagebot.harness.pipeline.worktree import repository_root

    if ledger is None:
        ledger = default_ledger(repository_root(Path.cwd()))
        if not ledger.is_file():
            return None
    with Ledger.open(ledger, readonly=True) as book:
        rows = book.test_history(branch, test_id=test_id)
        flaky = {
            key: numbers
            for key, numbers in flaky_history(book, branch).items()
            if key[1] == test_id or key[1].startswith(test_id + "::")
        }
    title = f"history on {branch} (latest {HISTORY_PIPELINES} pipelines of {ledger}):"
    if not rows:
        return f"{title} not run there"
    lines = [title]
    for number, commit, stage, test, outcome, attempts in rows:
        shown = (
            f"flaky (failed, then passed on attempt {attempts})" if outcome == "flaky" else outcome
        )
        lines.append(f"  #{number} {commit[:7]} {stage} {test}: {shown}")
    for (family, test), numbers in sorted(flaky.items()):
        lines.append(
            f"flaky on {branch}: {test} in {family}: " + ", ".join(f"#{n}" for n in numbers)
        )
    return "\n".join(lines)
