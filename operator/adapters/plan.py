"""What to do with one engine pod's adapters, decided from what its engine reports.

Pure: the copies the pod should hold (roll.py says which: during a version roll, the
new version beside the old one), the engine's own list (GET /v1/lora_adapters) and what
this operator remembers of earlier attempts in, the actions and each copy's state on the
pod out. The rules:

- a copy the engine lacks is loaded; one it has but nobody wants is unloaded (the engine
  lets its requests in flight finish);
- a copy of another version (another folder, or the same folder under another
  `version`) is replaced in place: roll.py asks for that only once no request is
  routed to it;
- a load the engine refused (a bad folder, a rank above --max-lora-rank, another base
  model) is `failed` with the engine's message and not retried for that version on that
  container; one the engine did not answer is retried with backoff, then failed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# the engine's states (GET /v1/lora_adapters) in which it serves the adapter
SERVING = ("gpu", "cpu", "disk")
MAX_ATTEMPTS = 5  # unanswered loads of one version on one pod before it counts as failed
BACKOFF_S = (2.0, 4.0, 8.0, 16.0)


@dataclass(frozen=True)
class Wanted:
    """An adapter of the spec, with the folder the engine container loads it from."""

    name: str
    path: str
    version: str


@dataclass(frozen=True)
class Reported:
    """An adapter as the engine lists it."""

    name: str
    path: str
    state: str  # gpu | cpu | disk | loading | failed
    error: str | None = None


@dataclass
class Attempts:
    """How loads of one wanted adapter (name, folder, version) into one container went."""

    failures: int = 0  # loads the engine did not answer
    retry_at: float = 0.0
    refused: str | None = None  # the engine's 400: never retried


@dataclass
class PodMemory:
    """What this operator remembers of one engine container (a restart is a new one)."""

    loaded: dict[str, str] = field(default_factory=dict)  # adapter -> version it serves
    attempts: dict[Wanted, Attempts] = field(default_factory=dict)


@dataclass(frozen=True)
class Action:
    kind: str  # load | replace | unload
    name: str
    path: str = ""


@dataclass(frozen=True)
class OnPod:
    """An adapter's state on the pod: loading | loaded | failed."""

    name: str
    version: str
    state: str
    message: str = ""


def backoff_s(failures: int) -> float:
    return BACKOFF_S[min(failures, len(BACKOFF_S)) - 1] if failures else 0.0


def plan_pod(
    wanted: Iterable[Wanted], reported: Mapping[str, Reported], memory: PodMemory, now: float
) -> tuple[list[Action], list[OnPod]]:
    """(actions, states) for one pod."""
    actions: list[Action] = []
    states: list[OnPod] = []
    wanted = list(wanted)
    for want in wanted:
        have = reported.get(want.name)
        tried = memory.attempts.get(want, Attempts())
        state = _state(want, have, tried, memory.loaded.get(want.name), now)
        if state is not None:
            states.append(state)
            continue
        if have is None:
            actions.append(Action("load", want.name, want.path))
            states.append(OnPod(want.name, want.version, "loading", "loading"))
        else:
            actions.append(Action("replace", want.name, want.path))
            states.append(OnPod(want.name, want.version, "loading", "replacing the old version"))
    names = {w.name for w in wanted}
    actions += [Action("unload", name) for name in sorted(reported) if name not in names]
    return actions, states


def _state(
    want: Wanted, have: Reported | None, tried: Attempts, loaded: str | None, now: float
) -> OnPod | None:
    """The adapter's state when nothing needs doing, else None (load or replace it).
    `loaded`: the version this operator saw the engine's copy serve (None: unknown, e.g.
    after an operator restart: a copy from the wanted folder counts as the wanted one)."""
    if tried.refused is not None:
        return OnPod(want.name, want.version, "failed", tried.refused)
    if tried.failures >= MAX_ATTEMPTS:
        return OnPod(want.name, want.version, "failed", "the engine did not answer the load")
    if tried.failures and now < tried.retry_at:
        return OnPod(want.name, want.version, "loading", f"retrying ({tried.failures} failed)")
    if have is None:
        return None
    if have.path != want.path or loaded not in (None, want.version):
        return None
    if have.state == "failed":
        return OnPod(want.name, want.version, "failed", have.error or "the engine failed it")
    if have.state in SERVING:  # its tier (gpu, cpu, disk) moves with load: not status
        return OnPod(want.name, want.version, "loaded")
    return OnPod(want.name, want.version, "loading", have.state)


def serves_some_version(name: str, reported: Mapping[str, Reported]) -> bool:
    have = reported.get(name)
    return have is not None and have.state in SERVING
