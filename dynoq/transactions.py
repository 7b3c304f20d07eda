# Generated from dynoq/asyncio/transactions.py by scripts/unasync.py: edit that file,
# then run `python scripts/unasync.py` (tests/test_unasync.py fails when this
# is stale; digest a25f13e23f6218e6: of the text below, an edit by hand does not match).
"""Transactional messages: the handle of a prepared (half) message, and the ``with`` block
that commits it on a clean exit and rolls it back on an exception (DESIGN.md §3.6).

The decisions are in :mod:`dynoq._core.transactions`; this shell runs them on a backend. The
asyncio shell is written by hand; the sync one is generated from it (scripts/unasync.py).
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from ._core.transactions import TransactionOps
from .backend import Backend


class Half:
    """A prepared message: stored, never delivered, until :meth:`commit`. Get one from
    ``q.prepare(...)`` (or a topic's ``t.prepare(...)``), or rebuild one from
    its id with ``q.half(id)`` (for a process that prepared it and then restarted)."""

    def __init__(
        self, backend: Backend, transactions: TransactionOps, id: str, shard: int | None = None
    ) -> None:
        self.backend = backend
        self.transactions = transactions
        self.id = id
        self._shard = shard

    def __repr__(self) -> str:
        return f"<dynoq.Half {self.id!r} of {self.transactions.ops.name!r}>"

    def commit(self) -> bool:
        """Make the message deliverable (now, or after its delay counted from now); True
        if it is committed (now or before), False if it was rolled back (then nothing
        is delivered). Raises InvalidArgument for an id that was never prepared."""
        return self._settle("commit")

    def rollback(self) -> bool:
        """Remove the prepared message; True if it is rolled back (now or before), False
        if it was committed (then nothing is removed). Raises InvalidArgument for an id
        that was never prepared."""
        return self._settle("rollback")

    def _settle(self, what: str) -> bool:
        if self._shard is None:
            self._shard = self.backend.drive(self.transactions.locate(self.id))
        reply = self.backend.drive(self.transactions.settle_flow(self._shard, self.id, what))
        return self.transactions.decided(self.id, what, reply)


class Transaction:
    """``with q.transaction(payload, ...) as half:`` prepares on entry, commits on a
    clean exit, rolls back when the block raises (the exception goes on)."""

    def __init__(
        self,
        backend: Backend,
        transactions: TransactionOps,
        payload: Any,
        options: dict[str, Any],
    ) -> None:
        self.backend = backend
        self.transactions = transactions
        self.payload = payload
        self.options = options
        self.half: Half | None = None

    def __enter__(self) -> Half:
        msg_id, shard, call = self.transactions.prepare(self.payload, **self.options)
        self.backend.run(call)
        self.half = Half(self.backend, self.transactions, msg_id, shard)
        return self.half

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self.half is not None
        if kind is None:
            self.half.commit()
        else:
            self.half.rollback()
