"""litellm, the proxy and SDK many teams route model calls through, against the server
with its OpenAI-compatible providers (`openai/`, `text-completion-openai/`): chat whole
and streamed, a text completion and a forced tool call, each equal to what the official
openai client gets for the same seeded request. litellm runs from its own venv
(client_envs.py, `make client-envs`); the test skips, saying so, where it is missing."""

from __future__ import annotations

import json
import subprocess

import openai
import pytest

from tests.engine.entrypoints.client_envs import LITELLM
from tests.engine.entrypoints.live_server import API_KEY

pytestmark = pytest.mark.skipif(
    LITELLM.executable() is None, reason="litellm is not installed: make client-envs"
)
SCRIPT = LITELLM.requirements.parent / "calls.py"
MESSAGES = [{"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def results(api_server) -> dict[str, dict]:
    command = [str(LITELLM.executable()), str(SCRIPT), f"{api_server.url}/v1", API_KEY]
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return {line["call"]: line for line in map(json.loads, done.stdout.splitlines())}


@pytest.fixture(scope="module")
def client(api_server):
    return openai.OpenAI(base_url=f"{api_server.url}/v1", api_key=API_KEY)


def test_chat_whole_and_streamed_is_what_the_official_client_gets(results, client):
    same = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=12,
                                          seed=7)  # fmt: skip
    assert results["chat"]["content"] == same.choices[0].message.content
    assert results["chat"]["usage"]["completion_tokens"] == same.usage.completion_tokens
    assert results["chat"]["finish_reason"] == same.choices[0].finish_reason
    assert results["chat_stream"]["content"] == same.choices[0].message.content


def test_a_text_completion_is_what_the_official_client_gets(results, client):
    same = client.completions.create(model="tiny", prompt="Once", max_tokens=12, seed=7)
    assert results["text_completion"]["text"] == same.choices[0].text


def test_a_forced_tool_call_reaches_litellm_parsed(results):
    (call,) = results["tools"]["calls"]  # parallel_tool_calls false: one
    assert call["name"] == "add" and results["tools"]["finish_reason"] == "tool_calls"
    arguments = json.loads(call["arguments"])
    assert set(arguments) == {"a", "b"} and all(0 <= v <= 99 for v in arguments.values())
