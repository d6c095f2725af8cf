"""A pytest plugin for the runs of tests/mutation/run.py (``-p mutation_profile``): hypothesis's
``mutation`` profile, chosen with ``--hypothesis-profile=mutation``. Each mutant's run sees the
examples of one fixed seed, never shrinks the first failing one (the failure is all a kill
needs; shrinking it can take longer than the run) and keeps no example database (every run sees
the same examples, whatever an earlier mutant found). It also sets each worker's --basetemp."""

import os

import pytest
from hypothesis import Phase, settings

settings.register_profile("mutation", phases=(Phase.explicit, Phase.generate), database=None)


@pytest.hookimpl(tryfirst=True)  # before pytest's tmpdir plugin reads the option
def pytest_configure(config: pytest.Config) -> None:
    """Each of run.py's workers gives its tests their own --basetemp, through this variable: one
    test command serves every worker, and temporary folders shared by two would collide."""
    basetemp = os.environ.get("STAGEBOT_MUTATION_BASETEMP")
    if basetemp and not config.option.basetemp:
        config.option.basetemp = basetemp
