"""benchmarks/ab.py: one benchmark on two revisions, alternating, read back from its
tables (the tool a change's effect is measured with)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.ab import ROOT, bench_dir, check_imports, checkout, report, rows
from benchmarks.common import table


def test_rows_reads_every_number_of_a_table_by_its_row_and_column() -> None:
    out = "\n".join(
        [
            "server 8.1, 50000 messages",
            table(
                [
                    ("operation", "median msgs/s", "runs", "ratio"),
                    ("raw bulk push", "123,456", "120,001 123,456 130,002", ""),
                    ("push_many", "98,765.5", "98,765.5", "0.80x"),
                    ("p99 lateness", "4.2 ms (none stuck)", "", "1.10x"),
                    ("no number", "n/a", "", ""),
                ]
            ),
            "Redis memory per queued message: 120 bytes (used_memory delta)",
        ]
    )
    assert rows(out) == {
        "raw bulk push | median msgs/s": 123456.0,
        "push_many | median msgs/s": 98765.5,
        "push_many | runs": 98765.5,
        "push_many | ratio": 0.8,
        "p99 lateness | median msgs/s": 4.2,
        "p99 lateness | ratio": 1.1,
    }


def test_report_gives_medians_ranges_and_the_ratio_of_each_round() -> None:
    text = report("old", "new", {"push": {"a": [100.0, 200.0, 300.0], "b": [150.0, 200.0, 600.0]}})
    row = text.splitlines()[2].split()
    assert row == ["push", "200", "100-300", "200", "150-600", "1.50x", "1.00-2.00"]


def test_checkout_writes_a_revision_apart_and_dot_is_this_tree(tmp_path: Path) -> None:
    assert checkout(".", tmp_path) == ROOT
    tree = checkout("HEAD", tmp_path)
    assert tree.parent == tmp_path and (tree / "dynoq" / "__init__.py").exists()
    assert checkout("HEAD", tmp_path) == tree  # once
    worktrees = subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True
    ).stdout
    assert str(tmp_path) not in worktrees


@pytest.mark.slow
def test_ab_runs_a_benchmark_on_both_revisions(embedded_server: object) -> None:
    url = f"redis://{embedded_server.host}:{embedded_server.port}/0"  # type: ignore[attr-defined]
    ab = [sys.executable, "-m", "benchmarks.ab", "HEAD", ".", "bench_core", "--rounds", "2"]
    small = ["--n", "300", "--single-n", "100", "--drain-n", "300", "--slice", "100"]
    done = subprocess.run(
        [*ab, "--url", url, "--", *small],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("python -m benchmarks.ab HEAD . bench_core --rounds 2")
    names = {line.split("  ")[0] for line in lines[3:]}
    assert {"push_many | median msgs/s", "push_many | ratio vs raw"} <= names


def test_ab_runs_this_trees_benchmark_on_an_older_revision(embedded_server: object) -> None:
    """bench_drain (where a drain's time goes) on HEAD and this tree, --bench-from ."""
    url = f"redis://{embedded_server.host}:{embedded_server.port}/0"  # type: ignore[attr-defined]
    ab = [sys.executable, "-m", "benchmarks.ab", "HEAD", ".", "bench_drain", "--rounds", "1"]
    done = subprocess.run(
        [*ab, "--bench-from", ".", "--url", url, "--", "--n", "300"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, done.stderr
    names = {line.split("  ")[0] for line in done.stdout.splitlines()[3:]}
    assert {
        f"small dict: {part} | median us a message" for part in ("pop, client", "server")
    } <= names


def test_a_repeated_column_name_keeps_each_columns_figures() -> None:
    out = table(
        [("work", "server", "ratio", "client", "ratio"), ("keyed", "19.6", "1.9x", "8.1", "2.6x")]
    )
    assert rows(out) == {
        "keyed | server": 19.6,
        "keyed | ratio": 1.9,
        "keyed | client": 8.1,
        "keyed | ratio 2": 2.6,
    }


def test_a_range_cell_is_not_read_as_a_figure() -> None:
    out = table([("part", "median us", "range"), ("pop", "4.31", "4.10-4.90")])
    assert rows(out) == {"pop | median us": 4.31}


def test_bench_from_runs_one_trees_benchmarks_with_each_sides_own_dynoq(tmp_path: Path) -> None:
    old = checkout("HEAD", tmp_path)
    assert bench_dir(ROOT, ROOT, tmp_path) == ROOT and bench_dir(old, None, tmp_path) == old
    shim = bench_dir(old, ROOT, tmp_path)
    check_imports(old, shim)  # dynoq: the old tree's
    where = subprocess.run(
        [sys.executable, "-c", "import benchmarks, dynoq; print(benchmarks.__path__[0])"],
        cwd=shim,
        env={**os.environ, "PYTHONPATH": str(old)},
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert Path(where).resolve() == (ROOT / "benchmarks").resolve()
