"""The wire format between the frontend and the engine core process: msgpack via msgspec.

Every ZeroMQ message is two frames, a kind and a msgpack payload. msgspec encodes the
engine's plain dataclasses directly and decodes them back into the same types, checked
against their annotations, at a few microseconds per request.
"""

from __future__ import annotations

import msgspec

from pagoda.engine.engine_core.loop import (
    ABORT,
    ADD,
    ADD_LORA,
    REMOVE_LORA,
    SHUTDOWN,
    CoreMessage,
)
from pagoda.engine.messages import EngineCoreOutputs, EngineCoreRequest, LoRAAdapter

# Core → frontend kinds.
READY = b"ready"  # payload: kv capacity in tokens
OUTPUTS = b"outputs"  # payload: EngineCoreOutputs
DEAD = b"dead"  # payload: what killed the core (str)
REFUSED = b"refused"  # payload: why the core could not start from this config (str)

_encoder = msgspec.msgpack.Encoder()
_inbound = {
    ADD: msgspec.msgpack.Decoder(list[EngineCoreRequest]),
    ABORT: msgspec.msgpack.Decoder(list[str]),
    ADD_LORA: msgspec.msgpack.Decoder(LoRAAdapter),
    REMOVE_LORA: msgspec.msgpack.Decoder(int),
}
_outputs = msgspec.msgpack.Decoder(EngineCoreOutputs)


def encode_message(kind: str, payload) -> list[bytes]:
    return [kind.encode(), b"" if payload is None else _encoder.encode(payload)]


def decode_message(frames: list[bytes]) -> CoreMessage:
    kind = frames[0].decode()
    if kind == SHUTDOWN:
        return kind, None
    return kind, _inbound[kind].decode(frames[1])


def encode(payload) -> bytes:
    return _encoder.encode(payload)


def decode_outputs(payload: bytes) -> EngineCoreOutputs:
    return _outputs.decode(payload)


def decode_int(payload: bytes) -> int:
    return msgspec.msgpack.decode(payload, type=int)


def decode_str(payload: bytes) -> str:
    return msgspec.msgpack.decode(payload, type=str)
