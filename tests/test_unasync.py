"""The sync shells generated from their asyncio twins (scripts/unasync.py) are current,
and the rewrite does what its rules say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import unasync  # noqa: E402


def test_generated_sync_files_are_current() -> None:
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "unasync.py"), "--check"],
                         capture_output=True, text=True)
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
