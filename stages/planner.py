"""The planner: a `/bot run` command + catalog + PR context + History -> a Plan.

Pure functions over plain data. Selection runs in a fixed order and each step is recorded with its
reason: (1) base set, (2) additions, (3) filters, (4) path rules, (5) --skip-test, (6) reuse.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stagebot.stages.catalog import Catalog, Stage
from stagebot.stages.command import RUN_FLAGS, Command, RunOptions
from stagebot.stages.errors import PlanError
from stagebot.stages.history import EmptyHistory, EnvironmentChange, History
from stagebot.stages.patterns import name_matches, path_matches
from stagebot.stages.plan import Plan, PlannedShard, Step
from stagebot.stages.suggest import unknown

PASSED_STATES = ("SUCCESS", "REUSED")
STAGE_LISTING = "see `bot stages --list`"


@dataclass
class _Selection:
    """Stages selected so far (name -> why), with the steps that changed them."""

    catalog: Catalog
    why: dict[str, str] = field(default_factory=dict)
    explicit: set[str] = field(default_factory=set)  # named by the user
    forced: set[str] = field(default_factory=set)  # path rules do not apply (named, or forced)
    steps: list[Step] = field(default_factory=list)

    def add(
        self,
        step: str,
        reason: str,
        picks: dict[str, str],
        *,
        explicit: bool = False,
        forced: bool = False,
    ) -> None:
        added = [name for name in picks if name not in self.why]
        for name, why in picks.items():
            self.why.setdefault(name, why)
        if explicit:
            self.explicit |= set(picks)
        if explicit or forced:
            self.forced |= set(picks)
        self.steps.append(Step(step, reason, added=added))

    def keep(self, step: str, reason: str, keep) -> None:
        removed = [name for name in self.why if not keep(self.catalog.stage(name))]
        for name in removed:
            del self.why[name]
        self.steps.append(Step(step, reason, removed=removed))


def plan_run(
    command: Command,
    catalog: Catalog,
    *,
    changed_files: list[str] | None = None,
    commit: str | None = None,
    pr: int | None = None,
    history: History | None = None,
    environment_change: EnvironmentChange | None = None,
) -> Plan:
    """Plan a `/bot run`; unknown stage names or GPU types raise PlanError with "did you mean".

    ``environment_change(gpu_type, gpu_count, then)`` says what differs between the environment
    a shard ran in and the one it would run in now (None: nothing), where the planner runs on
    the machine that runs the shards (`bot run`, `bot dry-run`): a pass on the same commit is
    reused only where nothing does."""
    if command.name != "run" or command.run is None:
        raise PlanError(f"only `/bot run` is planned, not {command.name!r}")
    options = command.run
    _refuse_missing_backends(options, catalog)
    selection = _Selection(catalog)
    notes: list[str] = []
    if changed_files is None:
        notes.append("changed files unknown (no PR context): every path rule counts as matched")
    _base(selection, options, changed_files)
    _additions(selection, options)
    _filters(selection, options, catalog)
    skipped = _path_rules(selection, changed_files)
    if options.skip_test:
        test_stages = [n for n in selection.why if catalog.stage(n).kind == "test"]
        if selection.why and len(test_stages) == len(selection.why) and selection.explicit:
            raise PlanError(
                "--skip-test keeps only build and sanity stages, and the stages selected "
                f"({_names(test_stages)}) are all tests: nothing would run; drop --skip-test, "
                "or name a build or sanity stage"
            )
        skipped.update(
            {name: "--skip-test: only build and sanity stages run" for name in test_stages}
        )
        selection.steps.append(
            Step("skip-test", "--skip-test keeps only build/sanity stages", removed=test_stages)
        )
    if not selection.why:
        emptied = next((step for step in reversed(selection.steps) if step.removed), None)
        notes.append(
            "no stage is selected: nothing will run"
            + (f"; the {emptied.step} step removed the last ({emptied.reason})" if emptied else "")
        )
    shards = [
        _shard(
            catalog.stage(name),
            selection,
            skipped.get(name),
            options,
            commit,
            history,
            catalog.digest,
            environment_change,
        )
        for name in (stage.name for stage in catalog.stages)
        if name in selection.why
    ]
    reused = [shard.stage for shard in shards if shard.action == "reuse"]
    selection.steps.append(Step("reuse", _reuse_summary(options, commit, reused), removed=reused))
    narrowing = [
        flag.name for flag in RUN_FLAGS if flag.partly_tested and getattr(options, flag.field)
    ]
    approval = _approval_reasons(options, catalog)
    return Plan(
        command=command.to_json(),
        commit=commit,
        pr=pr,
        changed_files=changed_files,
        catalog_digest=catalog.digest,
        steps=selection.steps,
        shards=shards,
        gating=not narrowing,
        partly_tested_reason=(  # the cause only: each report says what follows from it once
            f"{', '.join(narrowing)} narrow{'s' if len(narrowing) == 1 else ''} the default "
            "selection"
            if narrowing
            else None
        ),
        needs_approval=bool(approval),
        approval_reasons=approval,
        notes=notes,
    )


def _base(selection: _Selection, options: RunOptions, changed: list[str] | None) -> None:
    catalog = selection.catalog
    if options.stage_list:
        picks = _resolve(catalog, options.stage_list, "--stage-list")
        selection.add("base", "--stage-list: exactly the named stages", picks, explicit=True)
        return
    if options.post_merge:
        picks = {stage.name: "--post-merge" for stage in catalog.stages}
        selection.add("base", "--post-merge: every stage of both phases", picks)
        return
    picks = {
        stage.name: "default"
        for stage in catalog.stages
        if stage.phase == "pre_merge" and not stage.multi_gpu
    }
    for stage in catalog.stages:
        if stage.phase == "pre_merge" and stage.multi_gpu and stage.run_if_changed:
            hit = _first_match(changed, stage.run_if_changed)
            if hit is not None:
                picks[stage.name] = f"run_if_changed matched {hit}"
    selection.add(
        "base",
        "default: every pre-merge single-GPU stage, plus multi-GPU pre-merge stages whose "
        "run_if_changed matches a changed file",
        picks,
    )


def _additions(selection: _Selection, options: RunOptions) -> None:
    catalog = selection.catalog
    if options.extra_stage:
        picks = _resolve(catalog, options.extra_stage, "--extra-stage")
        selection.add("extra-stage", "--extra-stage adds the named stages", picks, explicit=True)
    for flag, given in (
        ("--add-multi-gpu-test", options.add_multi_gpu_test),
        ("--only-multi-gpu-test", options.only_multi_gpu_test),
    ):
        if given:
            picks = {s.name: flag for s in catalog.stages if s.multi_gpu and s.phase == "pre_merge"}
            selection.add(
                "multi-gpu-stages",
                f"{flag} forces every multi-GPU pre-merge stage (path rules do not skip them)",
                picks,
                forced=True,
            )


def _refuse_missing_backends(options: RunOptions, catalog: Catalog) -> None:
    """A --test-backend no test stage has would keep none of them: not what anyone asked for
    (flags that undo each other are the grammar's CONTRADICTIONS)."""
    have = sorted({s.backend for s in catalog.stages if s.kind == "test" and s.backend})
    for backend in options.test_backend or ():
        if backend not in have:
            raise PlanError(
                f"--test-backend {backend}: no test stage of the catalog has that backend, so "
                f"none would run (the catalog's test backends: {', '.join(have) or 'none'})"
            )


def _names(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _filters(selection: _Selection, options: RunOptions, catalog: Catalog) -> None:
    if options.gpu_type:
        for gpu in options.gpu_type:
            if gpu not in catalog.gpu_types:
                raise PlanError("--gpu-type: " + unknown("GPU type", gpu, catalog.gpu_types))
        wanted = set(options.gpu_type)
        selection.keep(
            "gpu-type",
            f"--gpu-type keeps stages on {', '.join(options.gpu_type)}",
            lambda s: s.gpu_type in wanted,
        )
    if options.test_backend:
        backends = set(options.test_backend)
        selection.keep(
            "test-backend",
            f"--test-backend keeps test stages of "
            f"{', '.join(options.test_backend)} (build/sanity stages stay)",
            lambda s: s.kind != "test" or s.backend in backends,
        )
    if options.only_multi_gpu_test:
        selection.keep(
            "only-multi-gpu-test",
            "--only-multi-gpu-test keeps multi-GPU stages",
            lambda s: s.multi_gpu,
        )
    if options.disable_multi_gpu_test:
        selection.keep(
            "disable-multi-gpu-test",
            "--disable-multi-gpu-test drops multi-GPU stages",
            lambda s: not s.multi_gpu,
        )


def _path_rules(selection: _Selection, changed: list[str] | None) -> dict[str, str]:
    """Stages (not named by the user) that the PR's changed files let skip, with the reason."""
    skipped: dict[str, str] = {}
    if changed is not None:
        for name in selection.why:
            stage = selection.catalog.stage(name)
            if name in selection.forced:
                continue
            if stage.run_if_changed and _first_match(changed, stage.run_if_changed) is None:
                skipped[name] = (
                    f"run_if_changed: no changed file matches {', '.join(stage.run_if_changed)}"
                )
            elif stage.skip_if_only_changed and all(
                path_matches(path, stage.skip_if_only_changed) for path in changed
            ):
                skipped[name] = (
                    f"skip_if_only_changed: every changed file matches "
                    f"{', '.join(stage.skip_if_only_changed)}"
                )
    reason = (
        "changed files unknown: path rules skip nothing"
        if changed is None
        else f"path rules over {len(changed)} changed file(s); stages named by the user or "
        "forced by a multi-GPU flag are exempt"
    )
    selection.steps.append(Step("path-rules", reason, removed=list(skipped)))
    return skipped


def _shard(
    stage: Stage,
    selection: _Selection,
    skip_reason: str | None,
    options: RunOptions,
    commit: str | None,
    history: History | None,
    digest: str,
    environment_change: EnvironmentChange | None,
) -> PlannedShard:
    action, reason, reuse_from, reused_tests = "run", "", None, []
    if skip_reason is not None:
        action, reason = "skip", skip_reason
    else:
        action, reason, reuse_from, reused_tests = _reuse(
            stage, options, commit, history or EmptyHistory(), digest, environment_change
        )
    return PlannedShard(
        stage=stage.name,
        family=stage.family.name,
        kind=stage.kind,
        shard=stage.shard,
        shards=stage.shards,
        gpu_type=stage.gpu_type,
        gpu_count=stage.gpu_count,
        nodes=stage.nodes,
        backend=stage.backend,
        phase=stage.phase,
        timeout_minutes=stage.timeout_minutes,
        max_reruns=stage.max_reruns,
        rerun_max_failures=stage.rerun_max_failures,
        suites=[s.to_json() for s in stage.suites],
        command=stage.command,
        selected_by=selection.why[stage.name],
        explicit=stage.name in selection.explicit,
        action=action,
        reason=reason,
        reuse_from=reuse_from,
        reused_tests=reused_tests,
    )


def _reuse(
    stage: Stage,
    options: RunOptions,
    commit: str | None,
    history: History,
    digest: str,
    environment_change: EnvironmentChange | None,
) -> tuple[str, str, int | None, list[str]]:
    name = stage.name
    if options.disable_reuse_test:
        return "run", "--disable-reuse-test: everything runs", None, []
    if commit is None:
        return "run", "no commit pinned: nothing to reuse", None, []
    wanted = options.reuse_test if isinstance(options.reuse_test, int) else None
    prior = history.prior_shard(name, commit, wanted)
    where = f"pipeline #{wanted}" if wanted is not None else "any earlier pipeline"
    if prior is None:
        return "run", f"no result for this stage on {commit[:7]} in {where}", None, []
    if prior.catalog_digest != digest:
        return "run", f"catalog or waives changed since #{prior.pipeline}", None, []
    if environment_change is not None and (
        changed := environment_change(stage.gpu_type, stage.gpu_count, prior.environment)
    ):
        return "run", f"the environment changed since #{prior.pipeline}: {changed}", None, []
    if prior.state in PASSED_STATES:
        return "reuse", f"passed in #{prior.pipeline} on {commit[:7]}", prior.pipeline, []
    reused = list(prior.passed_tests)
    return (
        "run",
        f"#{prior.pipeline} ended {prior.state}: re-run, reusing its {len(reused)} passed test(s)",
        prior.pipeline if reused else None,
        reused,
    )


def _reuse_summary(options: RunOptions, commit: str | None, reused: list[str]) -> str:
    if options.disable_reuse_test:
        return "--disable-reuse-test: nothing is reused"
    if commit is None:
        return "no commit pinned: nothing is reused"
    source = f"pipeline #{options.reuse_test}" if isinstance(options.reuse_test, int) else "latest"
    return f"reuse from {source} on {commit[:7]}: {len(reused)} shard(s) reused"


def _approval_reasons(options: RunOptions, catalog: Catalog) -> list[str]:
    reasons = [
        f"{flag} needs the approval label"
        for flag, given in (
            ("--post-merge", options.post_merge),
            ("--add-multi-gpu-test", options.add_multi_gpu_test),
            ("--only-multi-gpu-test", options.only_multi_gpu_test),
        )
        if given
    ]
    for pattern in (*options.stage_list, *options.extra_stage):
        if "*" in pattern and any(
            s.phase == "post_merge" and name_matches(s.name, pattern) for s in catalog.stages
        ):
            reasons.append(
                f"the selector {pattern!r} matches post-merge stages (naming them "
                "exactly needs no approval)"
            )
    return reasons


def _resolve(catalog: Catalog, names: tuple[str, ...], flag: str) -> dict[str, str]:
    picks: dict[str, str] = {}
    all_names = [stage.name for stage in catalog.stages]
    for name in names:
        if "*" in name:
            matched = [n for n in all_names if name_matches(n, name)]
            if not matched:
                raise PlanError(
                    f"{flag}: the pattern {name!r} matches no stage (see `bot stages --list`)"
                )
            picks.update({n: f"{flag} pattern {name!r}" for n in matched})
        elif catalog.stage(name) is None:
            raise PlanError(f"{flag}: " + unknown("stage", name, all_names, listing=STAGE_LISTING))
        else:
            picks[name] = flag
    return picks


def _first_match(changed: list[str] | None, patterns: tuple[str, ...]) -> str | None:
    if changed is None:
        return "(changed files unknown)"
    return next((path for path in changed if path_matches(path, patterns)), None)
