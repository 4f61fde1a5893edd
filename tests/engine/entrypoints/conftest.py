"""One live server shared by the API tests (starting one costs seconds); the flood,
drain and crash tests start their own small ones."""

from __future__ import annotations

import httpx
import pytest

from tests.engine.entrypoints.live_server import API_KEY, LiveServer

# Small enough that "too many tokens" is easy to ask for, large enough for 200 streams.
SHARED_FLAGS = (
    "--served-model-name", "tiny", "served-alias",
    "--api-key", API_KEY,
    "--max-model-len", "512",
    "--metrics-compat", "vllm",
    "--request-timeout", "60",
)  # fmt: skip


@pytest.fixture(scope="session")
def api_server(llama_dir, tmp_path_factory):
    server = LiveServer(llama_dir, tmp_path_factory.mktemp("api-server"), *SHARED_FLAGS)
    try:
        yield server.wait_ready()
    finally:
        server.terminate()


@pytest.fixture(scope="session")
def demo_server(demo_model, tmp_path_factory):
    """The demo model (SmolLM2-135M-Instruct) served as `tiny`: a real tokenizer, for the
    load generators, whose synthetic prompts must encode back to the tokens they counted."""
    flags = ("--served-model-name", "tiny", "--api-key", API_KEY, "--max-model-len", "512")
    server = LiveServer(demo_model[0], tmp_path_factory.mktemp("demo-server"), *flags)
    try:
        yield server.wait_ready()
    finally:
        server.terminate()


@pytest.fixture
def start_server(llama_dir, tmp_path):
    """start_server(*flags) -> a ready LiveServer, terminated after the test."""
    servers: list[LiveServer] = []

    def start(*flags: str, ready: bool = True, model_dir=None) -> LiveServer:
        model_dir = model_dir or llama_dir
        server = LiveServer(model_dir, tmp_path, "--served-model-name", "tiny", *flags)
        servers.append(server)
        return server.wait_ready() if ready else server

    yield start
    for server in servers:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait()


@pytest.fixture(scope="module")
def http(api_server):
    """An httpx client of the shared server, with its API key."""
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30) as client:
        yield client
