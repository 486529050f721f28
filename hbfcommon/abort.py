"""A process ending itself on purpose, with its last words (the stall watch's ``HBF_STALL_ABORT_S``).

When a kernel does not end, the workload's main thread is blocked inside the driver for ever: no Python code runs
there again, no ``finally`` and no ``atexit``. The stall watch's thread (runtime_cuda.session) is the only code that
still runs; it ends the process with :func:`end_process`. What this process started and must not leave behind
registers a hook here first (:func:`register`): hbfd.runner's daemons stop in order (SIGTERM: hbfd closes admission,
ends every outstanding ticket, writes its summary), so the run leaves its summary, not an orphaned daemon. Hooks run
once each, newest first, each one's failure logged and the next one run."""
from __future__ import annotations

import itertools
import logging
import os
import sys
import threading
from typing import Callable, NoReturn

log = logging.getLogger("hbfcommon.abort")

EXIT_STALLED = 86            # the exit status of a process ended by its stall watch (HBF_STALL_ABORT_S)

_lock = threading.Lock()
_hooks: dict[int, tuple[str, Callable[[str], None]]] = {}
_ids = itertools.count(1)


def register(what: str, fn: Callable[[str], None]) -> int:
    """Run ``fn(reason)`` before this process ends itself; ``what`` names it in the log. Returns the hook's id."""
    with _lock:
        i = next(_ids)
        _hooks[i] = (what, fn)
        return i


def unregister(hook_id: int | None) -> None:
    if hook_id is not None:
        with _lock:
            _hooks.pop(hook_id, None)


def run_hooks(reason: str) -> list[str]:
    """Run every registered hook once (newest first), removing it; returns what failed, one line each."""
    with _lock:
        hooks = sorted(_hooks.items(), reverse=True)
        _hooks.clear()
    failed = []
    for _, (what, fn) in hooks:
        try:
            fn(reason)
        except Exception as e:  # noqa: BLE001 - last words: one failing hook must not keep the next from running
            failed.append(f"{what}: {type(e).__name__}: {e}")
            log.error("before ending the process: %s failed: %s", what, e)
    return failed


def end_process(reason: str, code: int = EXIT_STALLED) -> NoReturn:
    """Run the hooks, flush the logs and streams, and end the process with ``code`` (os._exit: the thread that
    calls it may not be the main thread, which can be blocked where nothing else would end it)."""
    run_hooks(reason)
    logging.shutdown()
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:  # noqa: BLE001 - a closed stream: nothing more to say there
            pass
    os._exit(code)
