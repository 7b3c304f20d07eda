"""Workflows under chaos (benchmarks/chaos_flows.py): worker processes SIGKILLed while a
chord of 1,000 and a chain of 50 run, the server killed and started again on its
append-only file; the callback and the chain's last step are pushed exactly once, with
every result. And the checker fails on a planted double callback."""

from __future__ import annotations

import pytest

from benchmarks import chaos_flows


@pytest.mark.slow
def test_a_chord_and_a_chain_push_their_next_step_once_through_kills_and_a_restart() -> None:
    report = chaos_flows.run(runs=2, members=1000, steps=50, every=0.3, seed=7, out=lambda _: None)
    table = chaos_flows.render(report)
    assert report.failures() == [], table
    assert report.kills >= 2 and report.restarts == 2, table
    assert report.callbacks_pushed == 4 and len(report.collected) >= 2, table


@pytest.mark.slow
def test_the_checker_fails_on_a_planted_double_callback() -> None:
    report = chaos_flows.run(
        runs=1, members=20, steps=3, every=0.5, seed=8, plant=True, out=lambda _: None
    )
    assert report.failures() == ["callbacks pushed 3, not 2"], chaos_flows.render(report)
