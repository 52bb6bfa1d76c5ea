"""SIGTERM ends a command as Ctrl-C does: the same clean-up, one line, its own exit status (143)."""

from __future__ import annotations

import signal
import threading


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, ``timeout``, a scheduler cancelling the job), raised where the process is, so
    that the clean-up of Ctrl-C runs: partial output files removed, the terminal's cursor restored."""


#: set when SIGTERM arrived: code that catches the raised Terminated and raises a plain
#: KeyboardInterrupt instead (Ray's signal check, while the driver waits on its tasks) would
#: otherwise make a termination look like Ctrl-C
received = threading.Event()


def was_terminated(interrupt: KeyboardInterrupt) -> bool:
    """Is this interrupt the SIGTERM, even when something re-raised it as a plain KeyboardInterrupt?"""
    return isinstance(interrupt, Terminated) or received.is_set()


def _raise_terminated(signum, frame):
    received.set()
    raise Terminated()


def terminate_like_interrupt() -> None:
    """Make SIGTERM raise :class:`Terminated` (main thread only: Python runs handlers there). Libraries
    that install their own handler (Ray's core worker) call this again after they start."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_terminated)
