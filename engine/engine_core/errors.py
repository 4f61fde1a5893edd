"""What a frontend hears when the engine core cannot serve any more."""

from __future__ import annotations


class EngineDeadError(RuntimeError):
    """The engine loop crashed; no request can be served until the process restarts."""


class RequestFailedError(RuntimeError):
    """The engine could not serve one request (its adapter failed to load); it keeps
    serving the others."""
