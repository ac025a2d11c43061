"""Helpers for tests that run real servers and real Worker processes.

* ``wait_until(description, probe, timeout)``: poll a condition with a deadline.
* ``FileGate(directory, name)``: a cross-process rendezvous through files, used to stop a
  child process at an exact point (then SIGKILL it there).
* ``WorkerProcess``: a Worker in its own child process and process group, built from a
  ``module:factory`` that returns a ``dex.Registry``.
"""

from __future__ import annotations

from tests.support.gates import GATE_DIR_ENV, FileGate
from tests.support.polling import async_wait_until, wait_until
from tests.support.process import WorkerProcess, open_sockets

__all__ = [
    "GATE_DIR_ENV",
    "FileGate",
    "WorkerProcess",
    "async_wait_until",
    "open_sockets",
    "wait_until",
]
