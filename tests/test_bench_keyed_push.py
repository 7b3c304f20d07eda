"""benchmarks/bench_keyed_push.py runs: each variant of kpush it measures is still a push
(its run checks where the messages landed, and dynoq's pop while the record and chain are
kept), and its tables have a row per variant."""

from __future__ import annotations

import pytest
import redis

from benchmarks import bench_keyed_push as bench


@pytest.fixture
def bench_url(embedded_server: object) -> str:  # the session's private server (conftest)
    return f"redis://{embedded_server.host}:{embedded_server.port}/0"  # type: ignore[attr-defined]


def test_every_step_is_an_edit_that_matches_and_changes_the_script() -> None:
    texts = {bench.SHIPPED}
    for i, step in enumerate(bench.STEPS):
        if step.alone:
            texts.add(bench.variant([step]))
        texts.add(bench.variant(bench.STEPS[: i + 1]))
    # the shipped script, each rung of the ladder, each later step alone (all but "key
    # state"; the first alone is the first rung)
    assert len(texts) == 1 + len(bench.STEPS) + sum(s.alone for s in bench.STEPS[1:])


def test_a_tiny_run_pushes_with_every_variant_and_reports_each(bench_url: str) -> None:
    res = bench.run(bench_url, keys=40, per_key=5, batch=20, repeats=1, single_n=20)
    labels = [v.label for v in bench.variants()]
    ladder = [v.label for v in bench.variants() if v.kind != "alone"]
    assert set(res.cases) == {"batch", "single", "hot", "client"}
    assert set(res.cases["batch"]) == set(labels)  # each one ran and passed its check
    assert set(res.cases["single"]) == set(res.cases["hot"]) == set(ladder)
    for case in ("batch", "single", "hot"):
        rows = bench.ladder_table(res, case)
        named = [r[0] for r in rows[1:]]
        assert set(res.cases[case]) <= set(named)
        assert all(float(x[0]) > 0 for got in res.cases[case].values() for x in got)
    text = bench.report(res, 40, 5, 20, 1)
    assert all(label in text for label in labels)
    assert set(res.cases["client"]) == {
        "dynoq push_many",
        "raw push, batched",
        "dynoq push (one a call)",
        "raw push (one a call)",
    }


def test_a_variant_that_loses_its_messages_fails_its_check(bench_url: str) -> None:
    broken = bench.Variant(
        "drops the links",
        "ladder",
        bench.variant([]).replace("bulk('HSET', kwait, links)", "local _ = links", 1),
    )
    corpus = bench.Corpus.make(10, 2)
    r = redis.Redis.from_url(bench_url)
    try:
        with pytest.raises(AssertionError):
            bench.run_variant(r, bench_url, broken, corpus, 10, False)
    finally:
        r.close()
