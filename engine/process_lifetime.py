"""Child processes (the engine core, tensor-parallel workers) must not outlive their parent."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import threading


def exit_with_parent() -> None:
    """Exit as soon as the parent process does.

    An orphaned engine core or worker would hold its GPU (and ports) forever, so a daemon
    thread waits on the parent's sentinel and ends this process without cleanup.
    """
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="pagoda-parent-watch", daemon=True).start()
