"""Tactic choice of the cute kernels (pure logic: timings are injected, no GPU)."""

from __future__ import annotations

import pytest

from stagebot.kernels.cute import autotune
from stagebot.kernels.cute.tactics import TACTICS


@pytest.fixture(autouse=True)
def _fresh_choices(monkeypatch):
    monkeypatch.setattr(autotune, "_choices", {})
    monkeypatch.setattr(autotune, "measurements", {})
    monkeypatch.setattr(autotune, "failures", {})


def _not_capturing():
    return False


def _sampler_from(table):
    """A sampler that runs the trial once (so it records the tactic); its samples read the
    tactic's time from ``table``."""
    ran = []

    def sampler(run):
        run()
        tactic = ran[-1]
        return lambda: table[tactic]

    return sampler, ran


@pytest.mark.parametrize(
    ("rows", "bucket"), [(0, 1), (1, 1), (2, 2), (3, 4), (128, 128), (129, 256), (8192, 8192)]
)
def test_row_bucket_is_the_next_power_of_two(rows, bucket):
    assert autotune.row_bucket(rows) == bucket


def test_outside_tuning_the_first_fitting_tactic_runs_and_nothing_is_measured():
    sampler, ran = _sampler_from({})
    assert autotune.choose("k", TACTICS[1:], ran.append, sampler, _not_capturing) == TACTICS[1]
    assert ran == [] and autotune.measurements == {}


def test_tuning_picks_the_fastest_once_per_key_and_remembers_it():
    three = TACTICS[:3]
    table = {three[0]: 3.0, three[1]: 1.0, three[2]: 2.0}
    sampler, ran = _sampler_from(table)
    with autotune.tuning():
        assert autotune.choose("k", three, ran.append, sampler, _not_capturing) == three[1]
        assert ran == list(three)
        assert autotune.choose("k", three, ran.append, sampler, _not_capturing) == three[1]
    assert len(ran) == 3, "a tuned key is not measured again"
    assert autotune.choose("k", three, ran.append, sampler, _not_capturing) == three[1]
    assert autotune.measurements["k"] == {str(t): ms for t, ms in table.items()}


def test_a_slower_first_tactic_loses_and_ties_keep_the_earlier_one():
    sampler, ran = _sampler_from({TACTICS[0]: 2.0, TACTICS[1]: 2.0, TACTICS[2]: 9.0})
    with autotune.tuning():
        assert (
            autotune.choose("tie", TACTICS[:3], ran.append, sampler, _not_capturing) == TACTICS[0]
        )
    sampler, ran = _sampler_from({TACTICS[0]: 5.0, TACTICS[1]: 4.0})
    with autotune.tuning():
        assert (
            autotune.choose("other", TACTICS[:2], ran.append, sampler, _not_capturing) == TACTICS[1]
        )


def test_a_pinned_tactic_wins_over_tuning_and_is_unpinned_after_the_block():
    sampler, ran = _sampler_from({})
    with autotune.fixed_tactic(TACTICS[2]), autotune.tuning():
        assert autotune.pinned() == TACTICS[2]
        assert autotune.choose("k", TACTICS[:2], ran.append, sampler, _not_capturing) == TACTICS[2]
    assert autotune.pinned() is None and ran == []


def test_no_measuring_while_a_cuda_graph_is_captured():
    sampler, ran = _sampler_from({TACTICS[0]: 9.0, TACTICS[1]: 1.0})
    with autotune.tuning():
        chosen = autotune.choose("k", TACTICS[:2], ran.append, sampler, lambda: True)
    assert chosen == TACTICS[0] and ran == [] and "k" not in autotune.measurements


def test_when_every_measurement_fails_the_first_candidate_runs_uncached():
    def broken_sampler(run):
        raise RuntimeError("capture failed")

    with autotune.tuning():
        chosen = autotune.choose("k", TACTICS[:2], lambda t: None, broken_sampler, _not_capturing)
    want = "; ".join(f"{t}: RuntimeError: capture failed" for t in TACTICS[:2])
    assert chosen == TACTICS[0] and autotune.failures == {"k": want}
    assert "k" not in autotune.measurements and "k" not in autotune._choices


def test_a_tactic_that_fails_is_left_out_and_the_others_still_compete():
    """A compile error in the fastest-listed tactic must not hand the key to the first one."""
    times = {TACTICS[0]: 5.0, TACTICS[2]: 2.0}

    def sampler(run):
        run()
        tactic = ran[-1]
        return lambda: times[tactic]

    def trial(tactic):
        ran.append(tactic)
        if tactic == TACTICS[1]:
            raise ValueError("does not compile")

    ran: list = []
    with autotune.tuning():
        chosen = autotune.choose("k", TACTICS[:3], trial, sampler, _not_capturing)
    assert chosen == TACTICS[2] and autotune._choices["k"] == TACTICS[2]
    assert autotune.failures == {"k": f"{TACTICS[1]}: ValueError: does not compile"}
    assert autotune.measurements["k"] == {str(TACTICS[0]): 5.0, str(TACTICS[2]): 2.0}


def test_a_clock_that_drifts_during_tuning_does_not_favour_the_tactic_timed_first():
    """Every sample reads 0.01 ms more than the one before (a GPU warming up). The second tactic
    is 0.02 ms faster; timed one after the other (five samples each) it would read 1.05 against
    1.02 and lose; with the rounds interleaved it reads 1.03 against 1.04 and wins."""
    base = {TACTICS[0]: 1.0, TACTICS[1]: 0.98}
    clock = []

    def drifting(run):
        run()
        tactic = ran[-1]

        def sample():
            clock.append(tactic)
            return base[tactic] + 0.01 * (len(clock) - 1)

        return sample

    ran: list = []
    with autotune.tuning():
        chosen = autotune.choose("k", TACTICS[:2], ran.append, drifting, _not_capturing)
    assert chosen == TACTICS[1]
    assert clock[:4] == [TACTICS[0], TACTICS[1], TACTICS[0], TACTICS[1]]
    assert len(clock) == 2 * autotune.TIMED_ROUNDS


def test_a_sparse_rows_tactic_without_tile_limits_runs_as_its_dense_twin():
    from dataclasses import replace

    from stagebot.kernels.cute.tactics import effective

    sparse = next(t for t in TACTICS if t.sparse_rows)
    dense = replace(sparse, sparse_rows=False)
    assert effective(sparse, reads_limit=False) == dense and str(dense) in map(str, TACTICS)
    assert effective(sparse, reads_limit=True) is sparse
    assert effective(dense, reads_limit=True) is dense
