"""dynoq.signals: SIGTERM / SIGINT stop a loop that waits on an Event, never deadlock it."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

from dynoq.signals import StopOnSignals

# Each round: a signal sent at a random moment of a loop that does nothing but wait on the
# event (the sweeper's and the consumer's run loops, at their busiest). Set from the
# handler itself, the event's lock is taken while the interrupted wait holds it: about half
# of such rounds hang for good.
ROUNDS = """
import os, random, signal, threading
from dynoq.signals import StopOnSignals
for _ in range(150):
    stop = threading.Event()
    with StopOnSignals(stop):
        kill = threading.Timer(random.random() * 0.002, os.kill, (os.getpid(), signal.SIGTERM))
        kill.start()
        while not stop.is_set():
            stop.wait(0)
        kill.join()
print("all rounds stopped")
"""


def test_a_signal_stops_a_waiting_loop_at_any_moment() -> None:
    try:
        out = subprocess.run(
            [sys.executable, "-c", ROUNDS], capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:  # (run() has killed it)
        raise AssertionError("a signal deadlocked the loop") from None
    assert out.returncode == 0, out.stderr
    assert "all rounds stopped" in out.stdout


def test_the_handlers_before_come_back_and_other_threads_are_left_alone() -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    stop = threading.Event()
    with StopOnSignals(stop):
        assert signal.getsignal(signal.SIGTERM) != before[signal.SIGTERM]
        signal.raise_signal(signal.SIGINT)
        assert stop.wait(5)
    assert {sig: signal.getsignal(sig) for sig in before} == before

    elsewhere = threading.Event()

    def in_a_thread() -> None:  # Python allows handlers in the main thread only
        with StopOnSignals(elsewhere):
            pass

    t = threading.Thread(target=in_a_thread)
    t.start()
    t.join()
    assert not elsewhere.is_set()
