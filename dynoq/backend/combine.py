"""Group commit on the sync backend: single pushes of many threads, sent together.

The decisions (who sends, what goes in one request, who gets which answer) are
:mod:`dynoq._core.combine`; this shell holds its lock and wakes the threads. A push
arriving at an idle client is sent at once by its own thread. Pushes arriving while a
send is on its way wait; when it is back, its thread hands everything that waits to the
first waiting thread, which sends it as one request, and returns its own answer.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from .._core.calls import Call
from .._core.combine import Combiner, Pending, fail, plan, settle
from ..errors import DynoqError

if TYPE_CHECKING:
    from .._core.codec import Outgoing
    from .._core.ops import QueueOps


class Combining:
    """The single pushes of one client's threads (see the module). Thread-safe."""

    def __init__(self, run: Any) -> None:
        self._run = run  # Backend.run: retries a dropped connection within its window
        self._lock = threading.Lock()
        self._state = Combiner()

    def push(self, ops: QueueOps, out: Outgoing, mode: str) -> int:
        """Push one validated message (with whatever other threads push meanwhile); its
        result: 1 pushed, 0 skipped (mode "ensure"). Raises its own call's error."""
        p = Pending(ops, out, mode)
        with self._lock:
            if self._state.arrive(p):
                batch: list[Pending] | None = self._state.take()
            else:
                batch = None
                p.signal = threading.Event()  # made here: the sender sets it after taking p
        if batch is None:
            p.signal.wait()
            batch = p.batch  # handed a batch to send (p is in it), or answered
        if batch is not None:
            self._send(batch)
        if p.error is not None:
            raise p.error
        return p.result

    def _send(self, batch: list[Pending]) -> None:
        """Send ``batch``, answer its callers, then hand what waits meanwhile to one of
        them (or free the sender's place)."""
        try:
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
            for q in batch:
                if q.signal is not None:
                    q.batch = None
                    q.signal.set()
            with self._lock:
                more = self._state.done()
            if more:  # the first waiting thread sends them: this one returns its answer
                more[0].batch = more
                more[0].signal.set()
