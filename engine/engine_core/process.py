"""The engine core process: EngineCore behind two ZeroMQ sockets.

Started by `MPCoreClient` with the spawn method. It connects a PULL socket for requests
and a PUSH socket for outputs, reports READY once the model is loaded and the KV cache
sized, then runs the same `EngineCoreLoop` as the in-process client. It dies with its
parent (a watcher thread on the parent's sentinel) and ignores SIGINT and SIGTERM: Ctrl-C
or a service manager signals the whole process group, and the parent must first drain
its in-flight requests, which needs the core. Shutting down is the parent's decision.
"""

from __future__ import annotations

import logging
import os
import signal

import zmq

from pagoda.engine.config import EngineConfig
from pagoda.engine.engine_core import serial
from pagoda.engine.engine_core.loop import CoreMessage, EngineCoreLoop
from pagoda.engine.messages import EngineCoreOutputs
from pagoda.engine.process_lifetime import exit_with_parent

logger = logging.getLogger(__name__)


class ZmqTransport:
    def __init__(self, inbound: zmq.Socket, outbound: zmq.Socket) -> None:
        self.inbound = inbound
        self.outbound = outbound

    def receive(self, timeout: float | None) -> list[CoreMessage]:
        if timeout != 0:
            self.inbound.poll(None if timeout is None else int(timeout * 1000))
        messages = []
        while True:
            try:
                frames = self.inbound.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return messages
            messages.append(serial.decode_message(frames))

    def send(self, outputs: EngineCoreOutputs) -> None:
        self.outbound.send_multipart([serial.OUTPUTS, serial.encode(outputs)])

    def interrupt(self, error: BaseException) -> None:
        # Sockets belong to the loop's thread, so no message: exit, and the frontend sees
        # the process die (its sentinel) and fails every stream. The log names the cause.
        logger.error("the engine core is exiting: %s", error)
        os._exit(1)


def run_core_process(
    config: EngineConfig, input_address: str, output_address: str, log_level: int
) -> None:
    """The child's entry point; exits 0 on shutdown, 1 when the core dies."""
    exit_with_parent()
    for signum in (signal.SIGINT, signal.SIGTERM):  # the parent drains, then stops us
        signal.signal(signum, signal.SIG_IGN)
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    context = zmq.Context()
    inbound = context.socket(zmq.PULL)
    inbound.connect(input_address)
    outbound = context.socket(zmq.PUSH)
    outbound.connect(output_address)
    try:
        _serve(config, ZmqTransport(inbound, outbound))
        code = 0
    except BaseException as exc:  # reported to the parent, which fails every stream
        logger.exception("the engine core died")
        outbound.send_multipart([serial.DEAD, serial.encode(repr(exc))])
        code = 1
    outbound.close(linger=2000)  # let the last message out
    inbound.close(linger=0)
    context.term()
    os._exit(code)  # skip multiprocessing's cleanup: the parent owns the sockets' folder


def _serve(config: EngineConfig, transport: ZmqTransport) -> None:
    from pagoda.engine.engine_core.core import EngineCore

    try:
        core = EngineCore(config)
    except (ValueError, FileNotFoundError) as exc:
        transport.outbound.send_multipart([serial.REFUSED, serial.encode(str(exc))])
        return
    transport.outbound.send_multipart([serial.READY, serial.encode(core.kv_capacity_tokens)])
    logger.info("engine core ready in process %d", os.getpid())
    EngineCoreLoop(core, transport).run()
