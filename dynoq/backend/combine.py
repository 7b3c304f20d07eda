"""Group commit on the sync backend: single pushes of many threads, sent together.

The decisions (who sends, what goes in one request, who gets which answer) are
:mod:`dynoq._core.combine`; this shell holds its lock and wakes the threads. A push
arriving at an idle client is sent at once by its own thread, as the request it was
before group commit. Pushes arriving while a send is on its way wait; when it is back,
its thread hands everything that waits to the first waiting thread, which sends it as
one request, and returns its own answer.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import TYPE_CHECKING, Any

from .._core.calls import Call
from .._core.combine import Combiner, Pending, alone, fail, plan, settle
from ..errors import DynoqError

if TYPE_CHECKING:
    from .._core.codec import Outgoing
    from .._core.queue import QueueOps


class Combining:
    """The single pushes of one client's threads (see the module). Thread-safe."""

    def __init__(self, run: Any) -> None:
        self._run = run  # Backend.run: retries a dropped connection within its window
        self._lock = threading.Lock()
        self._state = Combiner()
        _EVERY.add(self)

    def _forget(self) -> None:
        """In a forked child: the parent's sends and waiting threads are not here (a
        send on its way at the fork would otherwise hold the sender's place forever)."""
        self._lock = threading.Lock()
        self._state = Combiner()

    def push(self, ops: QueueOps, out: Outgoing, mode: str) -> int:
        """Push one validated message (with whatever other threads push meanwhile); its
        result: 1 pushed, 0 skipped (mode "ensure"). Raises its own call's error."""
        with self._lock:
            if self._state.claim():
                p = None
            else:
                p = Pending(ops, out, mode)
                # A held lock the sender releases: the cheapest wake-up (an Event is a
                # Condition over such a lock). Made here: a sender takes p after this.
                p.signal = threading.Lock()
                p.signal.acquire()
                self._state.wait(p)
        if p is None:
            try:
                return int(self._run(ops.push([out], mode=mode)))
            finally:
                self._next()
        try:
            p.signal.acquire()
        except BaseException:  # interrupted (a signal in the main thread): others go on
            self._abandon(p)
            raise
        if p.batch is not None:  # handed a batch to send (p is in it)
            self._send(p.batch)
        if p.error is not None:
            raise p.error
        return p.result

    def _next(self) -> None:
        """A send is back: hand what waits meanwhile to the first waiting thread (or
        free the sender's place)."""
        with self._lock:
            more = self._state.done()
            if more:
                more[0].batch = more  # under the lock: see _abandon
        if more:
            more[0].signal.release()

    def _abandon(self, p: Pending) -> None:
        """``p``'s thread stops waiting: its push is dropped if no send took it yet; a
        batch handed to it is sent by a thread of its own, so that its other callers
        still get their answers."""
        with self._lock:
            if self._state.leave(p) or p.batch is None:
                return
            batch = p.batch
        threading.Thread(
            target=self._send, args=(batch,), daemon=True, name="dynoq-group-commit"
        ).start()

    def _send(self, batch: list[Pending]) -> None:
        """Send ``batch``, hand what waits meanwhile to the next sender, and answer the
        batch's callers (every one, whatever happens)."""
        try:
            single = alone(batch)
            if single is not None:
                try:
                    batch[0].result = self._run(single)
                except DynoqError as exc:
                    batch[0].error = exc
                return
            request, owners = plan(batch)
            try:
                reply = self._run(request)
            except DynoqError as exc:
                fail(batch, exc)
            else:
                settle(owners, [reply] if type(request) is Call else reply)
        except BaseException as exc:  # a bug or an interrupt: nobody may wait forever
            fail(batch, exc)
            raise
        finally:
            # What waited meanwhile goes out first, while these callers wake up (waking
            # a thread costs about what a round trip does, so the two overlap).
            self._next()
            for q in batch:
                if q.batch is None:  # the sender itself is not waiting
                    q.signal.release()


_EVERY: weakref.WeakSet[Combining] = weakref.WeakSet()


def _forget_all() -> None:
    for c in list(_EVERY):
        c._forget()


os.register_at_fork(after_in_child=_forget_all)
