"""What a Worker tells the person running it, through ``logging``.

Loggers: ``dex.worker`` (connects, registration, reconnects, stop and drain) and
``dex.worker.task`` (every failed attempt, with its traceback). A process that configured no
logging at all (the root logger has no handler) gets one stderr handler on the ``dex``
logger at INFO when its first Worker starts, so a plain worker script shows these lines;
``logging.basicConfig(...)`` or any handler of one's own takes over, and
``logging.getLogger("dex").setLevel(...)`` before the start sets the level.
"""

from __future__ import annotations

import logging
import sys
import threading
import time

from dex._protocol import ErrorInfo, RetryPolicySpec, Task

__all__ = ["attempt_failure_line", "install_default_handler", "task_log"]

task_log = logging.getLogger("dex.worker.task")

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_installed = threading.Lock()
_done = False


def install_default_handler() -> None:
    """Give the ``dex`` logger an INFO stderr handler when the process configured none."""
    global _done
    with _installed:
        if _done:
            return
        _done = True
        dex_log = logging.getLogger("dex")
        if logging.getLogger().handlers or dex_log.handlers:
            return  # the application configured logging: its choices win
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(_FORMAT))
        dex_log.addHandler(handler)
        if dex_log.level == logging.NOTSET:
            dex_log.setLevel(logging.INFO)


def will_retry(error: ErrorInfo, task: Task, policy: RetryPolicySpec | None) -> str | None:
    """Why the server will not retry this failed attempt, or None when it will.

    Judged from the Step's registered retry policy; a per-movement override of the
    options, which the Worker does not see, may differ.
    """
    if error.non_retryable:
        return f"{error.error_type} is not retryable"
    if policy is None:
        return None
    if policy.maximum_attempts is not None and task.attempt >= policy.maximum_attempts:
        return f"attempt {task.attempt} was the last of maximum_attempts={policy.maximum_attempts}"
    if policy.total_duration_s is not None and task.first_attempt_at > 0:
        if time.time() - task.first_attempt_at >= policy.total_duration_s:
            return f"the retry budget total_duration={policy.total_duration_s:g}s is spent"
    return None


def attempt_failure_line(
    task: Task, error: ErrorInfo, policy: RetryPolicySpec | None
) -> tuple[int, str]:
    """The level and text of the log line for one failed attempt (traceback included)."""
    if task.kind == "rpc":
        what = f"RPC {task.rpc_name} of Flow {task.flow_type} {task.flow_id}"
    else:
        what = (
            f"Step {task.step_type}.{task.kind} of Flow {task.flow_type} {task.flow_id}"
            f" (attempt {task.attempt}"
            + (f" of {policy.maximum_attempts}" if policy and policy.maximum_attempts else "")
            + ")"
        )
    reason = will_retry(error, task, policy)
    if task.kind == "rpc":
        level, outcome = logging.WARNING, "the caller receives the error"
    elif reason is None:
        level, outcome = logging.WARNING, "will retry"
    else:
        level, outcome = logging.ERROR, f"will not retry: {reason}"
    text = f"{what} failed: {error.error_type}: {error.message}; {outcome}"
    if error.stack:
        text += "\n" + error.stack.rstrip()
    return level, text
