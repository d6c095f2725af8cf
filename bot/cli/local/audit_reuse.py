"""`bot audit-reuse`: run a seeded sample of a pipeline's tests reused by key for real; each
disagreement is recorded as a reuse fault (harness/pipeline/audit.py; docs/reuse.md).

Exit codes: 0 every audited test passed (or nothing was reused), 1 a reuse fault was recorded,
2 a usage error (an unknown pipeline, a bad rate), 3 the ledger cannot be used.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from stagebot.bot.cli.options import local_catalog_option
from stagebot.bot.cli.run_options import ledger_option, out_option, pipeline_option, root_option


@click.command("audit-reuse")
@local_catalog_option
@ledger_option
@pipeline_option("The pipeline whose reused tests to audit (default: the ledger's newest).")
@root_option
@out_option
@click.option(
    "--rate",
    type=click.FloatRange(0, 1),
    default=None,
    help="The share of reused tests to run (default: reuse_audit_rate in .github/stagebot.yml, "
    "else 0.05; at least one test when any was reused).",
)
@click.option(
    "--seed",
    type=int,
    default=None,
    help="The sample's seed (default: the pipeline's number); recorded with the audit.",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The bot's settings (default: the repository's .github/stagebot.yml when it exists).",
)
def audit_reuse(catalog, ledger, number, root, out_dir, rate, seed, config_path) -> None:
    """Run a sample of the tests a pipeline reused by dependency key, for real; record each
    that fails as a reuse fault (never reused by key again, shown in the report)."""
    from stagebot.bot.config import load_config
    from stagebot.harness.ledger.book import Ledger
    from stagebot.harness.ledger.location import default_ledger, default_out_folder
    from stagebot.harness.pipeline.audit import audit_reuse as run_audit
    from stagebot.stages.catalog import load_catalog

    if rate is None:
        rate = load_config(config_path or _repository_config()).reuse_audit_rate
    loaded = load_catalog(catalog)
    with Ledger.open(ledger or default_ledger(root)) as book:
        number = number or book.latest_number()
        if number is None:
            raise click.UsageError(f"the ledger {book.path} has no pipeline to audit")
        out = out_dir or default_out_folder(root, book.path, number).with_name(f"audit-{number}")
        audit = run_audit(book, number, loaded, root, out, rate=rate, seed=seed)
    click.echo("\n".join(audit.lines()))
    sys.exit(1 if audit.faults else 0)


def _repository_config() -> Path | None:
    """The adopted repository's `.github/stagebot.yml` from any folder of it, when it has one."""
    from stagebot.bot.adopt.workflows import find_home
    from stagebot.bot.config import DEFAULT_PATH

    home = find_home(Path.cwd())
    return home / DEFAULT_PATH if home and (home / DEFAULT_PATH).is_file() else None
