"""Starting, watching and stopping the local processes of a cluster.

Every process starts in a session of its own, so stopping it signals its whole process
group (a server's workers included). A process is identified by its pid *and* its start
time from /proc, so a `cluster-down` run long after `cluster-up` never signals an
unrelated process that reused the pid.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

LOOPBACK = "127.0.0.1"


class StartupError(RuntimeError):
    """A process exited or never became ready; the message carries its log's tail."""


class PortBusyError(StartupError):
    """A port a process was to listen on is taken by another process."""


def free_port(host: str = LOOPBACK) -> int:
    """A port that is free right now (the kernel's pick), so no port is hard-coded."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def ensure_port_free(host: str, port: int) -> None:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise PortBusyError(f"{host}:{port} is already in use ({exc.strerror})") from exc


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces; fields after its ')' are plain
    return int(stat.rsplit(")", 1)[1].split()[19])


@dataclass
class Proc:
    """One started process: enough to find it again from another Python process."""

    name: str
    pid: int
    started: int
    log: str

    def alive(self) -> bool:
        return start_time(self.pid) == self.started and not _is_zombie(self.pid)

    def log_tail(self, num_lines: int = 20) -> str:
        try:
            lines = Path(self.log).read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-num_lines:])


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def spawn(
    name: str,
    argv: list[str],
    log_path: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Proc:
    """Start `argv` in its own session with stdout and stderr going to `log_path`, in
    `cwd` (default: the log's folder; never the repository root, where its operator/
    folder would shadow the standard library for a `python -m` child)."""
    log.debug("starting %s: %s", name, " ".join(argv))
    with open(log_path, "ab") as out:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
            cwd=cwd or log_path.parent,
        )
    started = start_time(popen.pid)
    if started is None:  # exited at once; keep it findable so the error shows its log
        started = -1
    _children[popen.pid] = popen  # reaped in stop(); keeps `alive()` honest in this process
    return Proc(name, popen.pid, started, str(log_path))


_children: dict[int, subprocess.Popen] = {}


def stop(proc: Proc, grace_s: float = 10.0) -> None:
    """SIGTERM the process group, then SIGKILL what is left after `grace_s`."""
    if proc.alive():
        log.debug("stopping %s (pid %d)", proc.name, proc.pid)
        _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            _reap(proc.pid)
            time.sleep(0.05)
    # the leader may be gone while a worker it started lives on: kill the group either way
    if _group_alive(proc.pid):
        _signal_group(proc.pid, signal.SIGKILL)
    _reap(proc.pid, block=True)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process is in the group `pgid`."""
    for entry in Path("/proc").iterdir():
        pid = int(entry.name) if entry.name.isdigit() else None
        if pid is not None and _pgid_of(pid) == pgid and not _is_zombie(pid):
            return True
    return False


def _pgid_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[2])
    except (OSError, ValueError, IndexError):
        return None


def _reap(pid: int, block: bool = False) -> None:
    popen = _children.get(pid)
    if popen is None:
        return
    try:
        popen.wait(timeout=5 if block else 0)
        _children.pop(pid, None)
    except subprocess.TimeoutExpired:
        pass


def marked(marker: str, live_only: bool = False) -> list[int]:
    """Every process but this one whose environment holds `marker` ("NAME=value");
    live_only: not those that exited and wait to be reaped."""
    needle = marker.encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if needle in environ and not (live_only and _is_zombie(int(entry.name))):
            found.append(int(entry.name))
    return found


def pid_alive(pid: int) -> bool:
    """Whether the process runs (an exited one not yet reaped does not)."""
    return start_time(pid) is not None and not _is_zombie(pid)


def sweep(marker: str) -> list[int]:
    """SIGKILL every process whose environment holds `marker` ("NAME=value"), except this
    one: every process a cluster starts carries its marker, so this finds whatever a
    graceful stop missed (a pod's grandchild, a backer killed mid-way) and nothing else."""
    killed = []
    for pid in marked(marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    for pid in killed:
        _reap(pid, block=True)
    return killed


def wait_for(
    condition: Callable[[], T],
    what: str,
    timeout_s: float = 60.0,
    period_s: float = 0.1,
    proc: Proc | None = None,
) -> T:
    """Poll `condition` until it returns something truthy and return that. Raises
    TimeoutError, or StartupError with the log's tail as soon as `proc` exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if result := condition():
            return result
        if proc is not None and not proc.alive():
            _reap(proc.pid)
            error = PortBusyError if "address already in use" in proc.log_tail() else StartupError
            raise error(
                f"{proc.name} exited while waiting for {what}; log {proc.log}:\n{proc.log_tail()}"
            )
        time.sleep(period_s)
    tail = f"; log {proc.log}:\n{proc.log_tail()}" if proc else ""
    raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}{tail}")
