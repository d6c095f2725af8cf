"""A pytest plugin for the runs of tests/mutation/run.py (``-p mutation_profile``): hypothesis's
``mutation`` profile, chosen with ``--hypothesis-profile=mutation``. Each mutant's run sees the
examples of one fixed seed, never shrinks the first failing one (the failure is all a kill
needs; shrinking it can take longer than the run) and keeps no example database (every run sees
the same examples, whatever an earlier mutant found)."""

from hypothesis import Phase, settings

settings.register_profile("mutation", phases=(Phase.explicit, Phase.generate), database=None)
