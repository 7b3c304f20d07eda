"""The sync shells generated from their asyncio twins (scripts/unasync.py) are current,
the rewrite does what its rules say, and the generator refuses what would let a twin
drift: a rule it no longer uses, a generated file edited by hand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import unasync  # noqa: E402


def test_generated_sync_files_are_current() -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "unasync.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr


def test_rewrite_rules() -> None:
    src = '''from ..message import Message
from ...errors import DynoqError
from .backend import AsyncBackend


class Queue:
    async def push(self, a: int,
                   b: int) -> None:
        """See :class:`dynoq.asyncio.Queue`."""
        x = await self.backend.run(a,
                                   b)
        async with self.lock:
            await asyncio.sleep(1)  # unasync: time.sleep(1)
        return x'''
    want = '''from .message import Message
from ..errors import DynoqError
from .backend import Backend


class Queue:
    def push(self, a: int,
                   b: int) -> None:
        """See :class:`dynoq.Queue`."""
        x = self.backend.run(a,
                                   b)
        with self.lock:
            time.sleep(1)
        return x'''
    assert unasync.unasync(src) == want


def test_a_module_deeper_in_the_package_keeps_the_imports_that_stay_inside_it() -> None:
    # dynoq/asyncio/consumer/x.py -> dynoq/consumer/x.py: ..queue is dynoq.asyncio.queue
    # there and dynoq.queue here (same dots); ..._core leaves dynoq.asyncio (one less).
    src = "from ..._core.group import LeaseBook\nfrom ..queue import Queue\nfrom . import a"
    want = "from .._core.group import LeaseBook\nfrom ..queue import Queue\nfrom . import a"
    assert unasync.unasync(src, level=2) == want


def test_the_rewrite_is_formatted_as_the_tree_is() -> None:
    # What the rewrite took out lets a call fit on one line again; the docstring's text
    # and the override's statement are kept as written.
    src = '''class Sweeper:
    async def close(self) -> None:
        """Stops (see :class:`dynoq.asyncio.Sweeper`,
        and its twin)."""
        self.x = await self.backend.run(
            await self.ops.stop(1, 2))
        await asyncio.sleep(1)  # unasync: time.sleep(1)
'''
    want = '''class Sweeper:
    def close(self) -> None:
        """Stops (see :class:`dynoq.Sweeper`,
        and its twin)."""
        self.x = self.backend.run(self.ops.stop(1, 2))
        time.sleep(1)
'''
    assert unasync.formatted(unasync.unasync(src), "dynoq/sweeper.py") == want


def test_a_files_own_rule_applies_to_it_alone() -> None:
    rules = [(r"\bfrom another task\b", "from another thread")]
    used: set[tuple[str, str]] = set()
    src = '"""Block until stop() from another task."""'
    assert (
        unasync.unasync(src, rules=rules, used=used)
        == '"""Block until stop() from another thread."""'
    )
    assert rules[0] in used
    assert unasync.unasync(src) == src


class Tree:
    """A package of one asyncio source and its generated twin, for the generator's
    main() (its ROOT, FILES, SUBS and RULES pointed at it)."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        (root / "dynoq" / "asyncio").mkdir(parents=True)
        self.src = root / "dynoq" / "asyncio" / "x.py"
        self.dst = root / "dynoq" / "x.py"
        self.src.write_text("async def f() -> None:\n    await g()\n")
        monkeypatch.setattr(unasync, "ROOT", root)
        monkeypatch.setattr(unasync, "FILES", {"dynoq/asyncio/x.py": "dynoq/x.py"})
        monkeypatch.setattr(unasync, "SUBS", [(r"\basync def\b", "def"), (r"\bawait ", "")])
        monkeypatch.setattr(unasync, "RULES", {})

    def run(self, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
        code = unasync.main(args)
        return code, capsys.readouterr().err


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Tree:
    return Tree(tmp_path, monkeypatch)


def test_a_stale_file_is_named_stale_and_written(
    tree: Tree, capsys: pytest.CaptureFixture[str]
) -> None:
    assert unasync.main([]) == 0 and "def f() -> None:\n    g()\n" in tree.dst.read_text()
    tree.src.write_text("async def f() -> int:\n    return await g()\n")
    code, err = tree.run("--check", capsys=capsys)
    assert code == 1 and "stale: dynoq/x.py (dynoq/asyncio/x.py changed since)" in err
    assert tree.run(capsys=capsys)[0] == 0
    assert tree.dst.read_text().endswith("def f() -> int:\n    return g()\n")
    assert tree.run("--check", capsys=capsys) == (0, "")


def test_a_generated_file_edited_by_hand_is_named_and_not_overwritten(
    tree: Tree, capsys: pytest.CaptureFixture[str]
) -> None:
    assert unasync.main([]) == 0
    tree.dst.write_text(tree.dst.read_text().replace("    g()", "    g()  # a fix here"))
    edited = tree.dst.read_text()
    code, err = tree.run("--check", capsys=capsys)
    assert code == 1 and "edited by hand: dynoq/x.py" in err and "stale" not in err
    assert "move the edit to dynoq/asyncio/x.py" in err
    tree.src.write_text("async def f() -> int:\n    return await g()\n")  # and stale too
    code, err = tree.run(capsys=capsys)
    assert code == 1 and "edited by hand: dynoq/x.py" in err
    assert tree.dst.read_text() == edited  # not overwritten
    assert tree.run("--force", capsys=capsys)[0] == 0
    assert tree.dst.read_text().endswith("    return g()\n")
    assert tree.run("--check", capsys=capsys) == (0, "")


def test_a_hand_kept_file_is_replaced_only_when_asked(
    tree: Tree, capsys: pytest.CaptureFixture[str]
) -> None:
    tree.dst.write_text("def f() -> None:\n    g()  # kept by hand\n")
    code, err = tree.run(capsys=capsys)
    assert code == 1 and "not generated: dynoq/x.py (no header)" in err
    assert "kept by hand" in tree.dst.read_text()
    assert tree.run("--force", capsys=capsys)[0] == 0
    assert tree.dst.read_text().startswith("# Generated from dynoq/asyncio/x.py")


def test_a_rule_no_file_uses_fails_the_generator(
    tree: Tree, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(unasync, "SUBS", [*unasync.SUBS, (r"\bAsyncIterator\b", "Iterator")])
    monkeypatch.setattr(unasync, "RULES", {"dynoq/asyncio/x.py": [("another task", "thread")]})
    for args in ([], ["--check"]):
        code, err = tree.run(*args, capsys=capsys)
        assert code == 1
        assert "rule no file uses (remove it): SUBS ('\\\\bAsyncIterator\\\\b'" in err
        assert "RULES['dynoq/asyncio/x.py'] ('another task', 'thread')" in err
    assert not tree.dst.exists()  # nothing written


def test_a_file_that_says_it_is_generated_is_listed(
    tree: Tree, capsys: pytest.CaptureFixture[str]
) -> None:
    (tree.root / "dynoq" / "y.py").write_text("# Generated from dynoq/asyncio/y.py by ...\n")
    code, err = tree.run("--check", capsys=capsys)
    assert code == 1 and "dynoq/y.py says it is generated, but is not in FILES" in err
