"""One benchmark on two revisions, alternating, in one command: a change's effect read
as a ratio with its spread.

    python -m benchmarks.ab REV1 REV2 BENCH [--rounds 5] [--url redis://...] [-- ARGS]
    python -m benchmarks.ab HEAD . bench_core -- --n 20000
    python -m benchmarks.ab 376b9e8 . bench_drain --bench-from .

Each revision is a git commit (``.`` is this checkout as it is, uncommitted changes
included) written to a directory of its own (``git archive``: no worktree is left
behind) and run with that directory first on ``sys.path``, so each side imports its own
dynoq and its own benchmark. Round ``i`` runs ``python -m benchmarks.BENCH --repeats 1
ARGS`` on both sides, REV1 first on even rounds and REV2 first on odd ones, so that
neither side always runs on a warmer (or busier) machine; both talk to one server (a
private embedded Valkey unless --url). Every number of the benchmark's tables
(``common.table``) is read per round, named by its row and column; the report gives
each side's median with its range over the rounds, and the median of the per-round
ratios REV2 / REV1 with their range (a ratio whose range holds 1.00 is not a change).
``--bench-from REV`` runs that revision's benchmark on both sides (each still imports its
own dynoq): a benchmark written after REV1 measures REV1 too.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from benchmarks.common import server_url, table

ROOT = Path(__file__).resolve().parent.parent
_NUMBER = re.compile(r"^-?[\d,]*\.?\d+")
_RUNS = re.compile(r"-?[\d,.]+(\s+-?[\d,.]+)+")  # a cell listing each round's figure
_SPAN = re.compile(r"-?[\d,.]+-[\d,.]+")  # a cell giving a range ("1.95-2.10")


def checkout(rev: str, into: Path) -> Path:
    """The tree of ``rev`` (``.``: this checkout, as it is) in a directory of its own."""
    if rev == ".":
        return ROOT
    sha = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{rev}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    tree = into / sha[:12]
    if not tree.exists():
        tree.mkdir(parents=True)
        archive = subprocess.Popen(
            ["git", "-C", str(ROOT), "archive", "--format=tar", sha], stdout=subprocess.PIPE
        )
        subprocess.run(["tar", "-x", "-C", str(tree)], stdin=archive.stdout, check=True)
        if archive.wait() != 0:
            raise SystemExit(f"git archive {sha} failed")
    return tree


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def bench_dir(tree: Path, bench_tree: Path | None, into: Path) -> Path:
    """Where a side runs ``python -m benchmarks...`` (its first sys.path entry): its own
    tree, or a directory holding only ``bench_tree``'s benchmarks (dynoq then comes from
    PYTHONPATH, the side's tree)."""
    if bench_tree is None or bench_tree == tree:
        return tree
    shim = into / f"bench-{bench_tree.name}"
    if not shim.exists():
        shim.mkdir()
        (shim / "benchmarks").symlink_to(bench_tree / "benchmarks", target_is_directory=True)
    return shim


def check_imports(tree: Path, cwd: Path | None = None) -> None:
    """The tree's own dynoq is the one imported (not the installed checkout's)."""
    where = subprocess.run(
        [sys.executable, "-c", "import dynoq; print(dynoq.__file__)"],
        cwd=cwd or tree,
        env=_env(tree),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not Path(where).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"{tree} imports dynoq from {where}, not its own")


def rows(output: str) -> dict[str, float]:
    """Every number in a benchmark's tables (common.table: a header line, a line of dashes
    whose runs mark the columns, rows), named ``row | column``: a cell counts when it
    starts with a number ("123,456", "0.80x", "4.2 ms") and is not a list of them (a
    benchmark's own runs, "9.70 8.12 9.81") nor a range ("1.95-2.10"). A column name
    given twice is numbered from its second ("ratio 2")."""
    found: dict[str, float] = {}
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if i == 0 or not (line.startswith("-") and set(line) <= {"-", " "}):
            continue
        spans = [m.span() for m in re.finditer(r"-+", line)]

        def cells(text: str, spans: list[tuple[int, int]] = spans) -> list[str]:
            return [text[a:b].strip() for a, b in spans]

        header = _unique(cells(lines[i - 1]))
        gaps = [(b, a) for (_, b), (a, _) in itertools.pairwise(spans)]
        for row in lines[i + 1 :]:
            if not row.strip() or any(row[b:a].strip() for b, a in gaps):
                break  # the table ended: a row has spaces between its columns
            name, *values = cells(row)
            for column, cell in zip(header[1:], values, strict=True):
                match = _NUMBER.match(cell)
                if match and not (_RUNS.fullmatch(cell) or _SPAN.fullmatch(cell)):
                    found[f"{name} | {column}"] = float(match.group().replace(",", ""))
    return found


def _unique(header: list[str]) -> list[str]:
    """Column names, a repeated one numbered from its second ("ratio", "ratio 2"): else a
    later column's figures would stand in for an earlier one's under one name."""
    out: list[str] = []
    for name in header:
        n = header[: len(out)].count(name)
        out.append(f"{name} {n + 1}" if n else name)
    return out


def run(
    tree: Path, bench: str, url: str, args: list[str], cwd: Path | None = None
) -> dict[str, float]:
    cmd = [sys.executable, "-m", f"benchmarks.{bench}", "--repeats", "1", "--url", url, *args]
    done = subprocess.run(cmd, cwd=cwd or tree, env=_env(tree), capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} in {tree} failed:\n{done.stdout}\n{done.stderr}")
    return rows(done.stdout)


def _range(values: list[float], digits: int) -> str:
    return f"{min(values):,.{digits}f}-{max(values):,.{digits}f}"


def report(a: str, b: str, seen: dict[str, dict[str, list[float]]]) -> str:
    out: list[tuple[str, ...]] = [
        ("row", f"{a} median", "range", f"{b} median", "range", "ratio", "ratio range")
    ]
    for name, sides in seen.items():
        xs, ys = sides.get("a", []), sides.get("b", [])
        if len(xs) != len(ys) or not xs:
            continue
        ratios = [y / x for x, y in zip(xs, ys, strict=True) if x]
        digits = 0 if statistics.median(xs) >= 100 else 2
        out.append(
            (
                name,
                f"{statistics.median(xs):,.{digits}f}",
                _range(xs, digits),
                f"{statistics.median(ys):,.{digits}f}",
                _range(ys, digits),
                f"{statistics.median(ratios):.2f}x" if ratios else "-",
                _range(ratios, 2) if ratios else "-",
            )
        )
    return table(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("a", metavar="REV1")
    p.add_argument("b", metavar="REV2")
    p.add_argument("bench", metavar="BENCH", help="a module of benchmarks/, e.g. bench_core")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--url", default=None, help="server (default: a private embedded Valkey)")
    p.add_argument(
        "--bench-from", default=None, metavar="REV", help="run REV's benchmark on both sides"
    )
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    opts, extra = p.parse_args(argv[:cut]), argv[cut + 1 :]  # after --: the benchmark's
    if opts.rounds < 1:
        p.error("--rounds must be at least 1")
    with tempfile.TemporaryDirectory(prefix="dynoq-ab-") as tmp:
        trees = {"a": checkout(opts.a, Path(tmp)), "b": checkout(opts.b, Path(tmp))}
        source = None if opts.bench_from is None else checkout(opts.bench_from, Path(tmp))
        dirs = {side: bench_dir(tree, source, Path(tmp)) for side, tree in trees.items()}
        for side, tree in trees.items():
            check_imports(tree, dirs[side])
            if not (dirs[side] / "benchmarks" / f"{opts.bench}.py").exists():
                raise SystemExit(f"{getattr(opts, side)} has no benchmarks/{opts.bench}.py")
        seen: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        with server_url(opts.url) as url:
            for i in range(opts.rounds):
                for side in ("a", "b") if i % 2 == 0 else ("b", "a"):
                    found = run(trees[side], opts.bench, url, extra, dirs[side])
                    for name, value in found.items():
                        seen[name][side].append(value)
                print(f"round {i + 1} of {opts.rounds} done", file=sys.stderr, flush=True)
    print(
        f"python -m benchmarks.ab {opts.a} {opts.b} {opts.bench} --rounds {opts.rounds}"
        + (f" --bench-from {opts.bench_from}" if opts.bench_from else "")
        + (f" -- {' '.join(extra)}" if extra else "")
    )
    print(report(opts.a, opts.b, seen))


if __name__ == "__main__":
    main()
