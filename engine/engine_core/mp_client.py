"""Run the engine core in its own process and talk to it over ZeroMQ (ipc:// sockets).

Two sockets, both bound here on paths in a fresh temporary folder (never fixed names, so
any number of engines share a machine): PUSH requests and aborts to the core, PULL step
outputs from it. The core process is watched through its sentinel: if it dies, the next
`get_outputs` raises EngineDeadError instead of waiting forever.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import multiprocessing
import shutil
import tempfile
import threading
import weakref
from pathlib import Path

import zmq

from pagoda.engine.config import EngineConfig
from pagoda.engine.engine_core import serial
from pagoda.engine.engine_core.errors import EngineDeadError
from pagoda.engine.engine_core.loop import ABORT, ADD, ADD_LORA, REMOVE_LORA, SHUTDOWN
from pagoda.engine.engine_core.process import run_core_process
from pagoda.engine.messages import EngineCoreOutputs, EngineCoreRequest, LoRAAdapter

logger = logging.getLogger(__name__)

_SHUTDOWN_GRACE_S = 10.0


class MPCoreClient:
    def __init__(self, config: EngineConfig) -> None:
        self._folder = Path(tempfile.mkdtemp(prefix="pagoda-core-"))
        self._context = zmq.Context()
        self._input = self._context.socket(zmq.PUSH)
        # Unbounded: the server's admission limit bounds what is in flight, and a full
        # queue must never block the event loop. With no peer (a dead core) sends fail fast.
        self._input.setsockopt(zmq.SNDHWM, 0)
        self._input.bind(f"ipc://{self._folder}/input")
        self._output = self._context.socket(zmq.PULL)
        self._output.bind(f"ipc://{self._folder}/output")
        self._send_lock = threading.Lock()  # the event loop and the output thread both send
        self._dead: EngineDeadError | None = None
        self._closed = False
        # spawn, not fork: the parent has threads (and on a GPU machine, CUDA state).
        # Not a daemon: it starts the tensor-parallel workers, which a daemon may not. It
        # exits with its parent (a watcher thread) and shutdown() runs at exit, before
        # multiprocessing's own exit hook would wait for it.
        self.process = multiprocessing.get_context("spawn").Process(
            target=run_core_process,
            args=(
                config,
                f"ipc://{self._folder}/input",
                f"ipc://{self._folder}/output",
                logging.getLogger().getEffectiveLevel(),
            ),
            name="pagoda-engine-core",
            daemon=False,
        )
        self.process.start()
        atexit.register(_shutdown_at_exit, weakref.ref(self))
        self._poller = zmq.Poller()
        self._poller.register(self._output, zmq.POLLIN)
        self._poller.register(self.process.sentinel, zmq.POLLIN)
        try:
            self.kv_capacity_tokens = self._wait_ready()
        except BaseException:
            self.shutdown()
            raise
        logger.info("engine core process %d ready", self.process.pid)

    def add_requests(self, requests: list[EngineCoreRequest]) -> None:
        self._send(serial.encode_message(ADD, requests))

    def abort_requests(self, request_ids: list[str]) -> None:
        self._send(serial.encode_message(ABORT, request_ids))

    def add_lora(self, adapter: LoRAAdapter) -> None:
        self._send(serial.encode_message(ADD_LORA, adapter))

    def remove_lora(self, lora_id: int) -> None:
        self._send(serial.encode_message(REMOVE_LORA, lora_id))

    def get_outputs(self, timeout: float) -> EngineCoreOutputs | None:
        frames = self._receive(timeout)
        if frames is None:
            return None
        kind, payload = frames
        if kind == serial.OUTPUTS:
            return serial.decode_outputs(payload)
        if kind == serial.DEAD:
            self._dead = EngineDeadError(serial.decode_str(payload))
            raise self._dead
        logger.error("ignoring an unexpected message %r from the engine core", kind)
        return None

    def shutdown(self) -> None:
        """Stop the core process and remove its sockets' folder; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self.process.is_alive():
            with contextlib.suppress(EngineDeadError):
                self._send(serial.encode_message(SHUTDOWN, None))
            self.process.join(_SHUTDOWN_GRACE_S)
        if self.process.is_alive():
            logger.warning("the engine core did not stop in %.0fs: killing it", _SHUTDOWN_GRACE_S)
            self.process.kill()
            self.process.join()
        self._input.close(linger=0)
        self._output.close(linger=0)
        self._context.term()
        shutil.rmtree(self._folder, ignore_errors=True)

    def _send(self, frames: list[bytes]) -> None:
        with self._send_lock:
            try:
                self._input.send_multipart(frames, zmq.NOBLOCK)
            except (zmq.Again, zmq.ZMQError) as exc:  # no peer: the core process is gone
                raise EngineDeadError("the engine core process is not running") from exc

    def _receive(self, timeout: float | None) -> list[bytes] | None:
        """The next message's frames; None on timeout; EngineDeadError once the core is gone."""
        if self._dead is not None:
            raise self._dead
        events = dict(self._poller.poll(None if timeout is None else int(timeout * 1000)))
        if self._output in events:  # drain what it sent before it exited
            return self._output.recv_multipart()
        if self.process.sentinel in events:
            self.process.join(1.0)  # reap it, for its exit code
            self._dead = EngineDeadError(
                f"the engine core process exited with code {self.process.exitcode}"
            )
            raise self._dead
        return None

    def _wait_ready(self) -> int:
        """Block until the core has loaded the model; its KV capacity in tokens."""
        try:
            kind, payload = self._receive(None)
        except EngineDeadError as exc:
            raise RuntimeError(f"the engine core failed to start: {exc}") from None
        if kind == serial.READY:
            return serial.decode_int(payload)
        if kind == serial.REFUSED:  # a setting the core rejected: the user's mistake
            raise ValueError(serial.decode_str(payload))
        raise RuntimeError(f"the engine core failed to start: {serial.decode_str(payload)}")


def _shutdown_at_exit(client_ref: weakref.ref) -> None:
    client = client_ref()
    if client is not None:
        client.shutdown()
