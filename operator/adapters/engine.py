"""The engine's adapter API, as the operator calls it on each engine pod: vLLM's bodies
(`GET /v1/lora_adapters`, `POST /v1/load_lora_adapter`, `POST /v1/unload_lora_adapter`)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import httpx

from pagoda.operator.adapters.plan import Reported
from pagoda.operator.builders.names import ENGINE_PORT

LIST_TIMEOUT_S = 3.0
LOAD_TIMEOUT_S = 60.0  # the engine checks the folder and hashes the weights first


@dataclass(frozen=True)
class Refused(Exception):
    """The engine answered 4xx: the adapter itself is wrong; its message says why."""

    message: str


class Unanswered(Exception):
    """No answer, or a 5xx: worth another try later."""


class EngineAdapters:
    def __init__(self, http: httpx.Client, pod_ip: str, api_key: str | None = None) -> None:
        self.http = http
        self.base = f"http://{pod_ip}:{ENGINE_PORT}/v1"
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def list(self) -> dict[str, Reported]:
        data = self._call("GET", "/lora_adapters", None, LIST_TIMEOUT_S).json()
        return {
            card["name"]: Reported(card["name"], card["path"], card["state"], card.get("error"))
            for card in data.get("data", [])
        }

    def load(self, name: str, path: str, replace: bool = False) -> None:
        body = {"lora_name": name, "lora_path": path, "load_inplace": replace}
        self._call("POST", "/load_lora_adapter", body, LOAD_TIMEOUT_S)

    def unload(self, name: str) -> None:
        with contextlib.suppress(Refused):  # already gone (404): the outcome wanted
            self._call("POST", "/unload_lora_adapter", {"lora_name": name}, LIST_TIMEOUT_S)

    def _call(self, method: str, path: str, body: dict | None, timeout_s: float) -> httpx.Response:
        try:
            response = self.http.request(
                method, self.base + path, json=body, headers=self.headers, timeout=timeout_s
            )
        except httpx.HTTPError as exc:
            raise Unanswered(f"{method} {path}: {exc!r}") from None
        if response.status_code >= 500:
            raise Unanswered(f"{method} {path}: {response.status_code} {response.text[:300]}")
        if response.status_code >= 400:
            raise Refused(_message(response))
        return response


def _message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return f"{response.status_code} {response.text[:500]}"
