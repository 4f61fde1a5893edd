"""LoRA through `pagoda serve` with the official `openai` client: two adapters and the
base model in one concurrent load, each answer the offline engine's; vLLM's load and
unload endpoints; bad adapters refused while other streams keep decoding."""

from __future__ import annotations

import asyncio
import json
import shutil

import httpx
import openai
import pytest

from pagoda.engine import LLM, LoRARequest, SamplingParams
from tests.engine.entrypoints.live_server import API_KEY

PROMPTS = ["the paged cache", "every tenant has a prompt", "hello there"]
MAX_TOKENS = 8
GREEDY = {"temperature": 0.0, "max_tokens": MAX_TOKENS, "extra_body": {"ignore_eos": True}}


@pytest.fixture(scope="module")
def adapters(peft_adapters):
    return peft_adapters("llama")


@pytest.fixture(scope="module")
def offline(llama_dir, adapters) -> dict[tuple[str | None, str], str]:
    """The offline engine's greedy text per (adapter name or None, prompt)."""
    llm = LLM(str(llama_dir), enable_lora=True, max_lora_rank=16)
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    texts = {}
    for name, lora in (
        (None, None),
        ("sql", LoRARequest("sql", 1, str(adapters[0]))),
        ("chat", LoRARequest("chat", 2, str(adapters[2]))),
        ("other", LoRARequest("other", 3, str(adapters[1]))),
    ):
        outputs = llm.generate(PROMPTS, params, lora_request=lora)
        for prompt, output in zip(PROMPTS, outputs, strict=True):
            texts[(name, prompt)] = output.outputs[0].text
    return texts


@pytest.fixture(scope="module")
def server(llama_dir, adapters, tmp_path_factory):
    from tests.engine.entrypoints.live_server import LiveServer

    server = LiveServer(
        llama_dir,
        tmp_path_factory.mktemp("lora-server"),
        "--served-model-name", "tiny",
        "--api-key", API_KEY,
        "--enable-lora", "--max-loras", "2", "--max-lora-rank", "16",
        "--lora-modules", f"sql={adapters[0]}",
        json.dumps({"name": "chat", "path": str(adapters[2]), "base_model_name": "tiny"}),
        "--enable-runtime-lora-updating",
    )  # fmt: skip
    try:
        yield server.wait_ready()
    finally:
        server.terminate()


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0)


def _post(server, path: str, body: dict, api_key: str | None = API_KEY) -> httpx.Response:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.post(f"{server.url}/v1/{path}", json=body, headers=headers, timeout=60)


def test_models_lists_the_adapters_with_their_base(client, adapters):
    cards = {m.id: m for m in client.models.list().data}
    assert set(cards) == {"tiny", "sql", "chat"}
    assert cards["sql"].model_extra["parent"] == "tiny"
    assert cards["sql"].model_extra["root"] == str(adapters[0])


def test_adapters_and_the_base_in_one_concurrent_load_answer_as_offline(server, offline):
    async def run() -> None:
        client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0)
        jobs, keys = [], []
        for _ in range(4):
            for model in ("tiny", "sql", "chat"):
                for prompt in PROMPTS:
                    jobs.append(client.completions.create(model=model, prompt=prompt, **GREEDY))
                    keys.append((None if model == "tiny" else model, prompt))
        results = await asyncio.gather(*jobs)
        for key, completion in zip(keys, results, strict=True):
            assert completion.choices[0].text == offline[key], key
        await client.close()

    asyncio.run(run())


def test_lora_name_picks_an_adapter_and_model_must_agree(client, server, offline):
    prompt = PROMPTS[0]
    by_name = client.completions.create(
        model="tiny",
        prompt=prompt,
        **GREEDY | {"extra_body": {"ignore_eos": True, "lora_name": "sql"}},
    )
    assert by_name.choices[0].text == offline[("sql", prompt)] and by_name.model == "sql"
    chat = client.chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "Hi"}], **GREEDY
    )
    assert chat.model == "chat" and chat.choices[0].message.content is not None
    clash = _post(server, "completions", {"model": "sql", "lora_name": "chat", "prompt": "x"})
    assert clash.status_code == 400 and clash.json()["error"]["param"] == "lora_name"
    unknown = _post(server, "completions", {"model": "tiny", "lora_name": "nope", "prompt": "x"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    assert _post(server, "completions", {"model": "nope", "prompt": "x"}).status_code == 404


def test_lora_adapters_reports_each_adapters_state(server, adapters):
    listing = httpx.get(
        f"{server.url}/v1/lora_adapters", headers={"Authorization": f"Bearer {API_KEY}"}
    ).json()
    by_name = {card["name"]: card for card in listing["data"]}
    assert set(by_name) == {"sql", "chat"} and listing["max_loras"] == 2
    assert by_name["sql"]["path"] == str(adapters[0]) and len(by_name["sql"]["digest"]) == 64
    assert by_name["chat"]["rank"] == 16 and by_name["chat"]["base_model"] == "tiny"
    assert {card["state"] for card in listing["data"]} <= {"gpu", "cpu"}
    assert all(card["loaded_at"] for card in listing["data"])


def test_runtime_load_unload_and_reload_from_another_path(client, server, adapters, offline):
    prompt = PROMPTS[1]
    body = {"lora_name": "live", "lora_path": str(adapters[0])}
    assert _post(server, "load_lora_adapter", body, api_key=None).status_code == 401
    loaded = _post(server, "load_lora_adapter", body)
    assert loaded.status_code == 200 and "added successfully" in loaded.text
    assert _post(server, "load_lora_adapter", body).status_code == 400  # already loaded
    first = client.completions.create(model="live", prompt=prompt, **GREEDY).choices[0].text
    assert first == offline[("sql", prompt)]  # the same folder as sql

    other_path = {"lora_path": str(adapters[1]), "load_inplace": True}
    replaced = _post(server, "load_lora_adapter", body | other_path)
    assert replaced.status_code == 200
    second = client.completions.create(model="live", prompt=prompt, **GREEDY).choices[0].text
    assert second == offline[("other", prompt)]

    unloaded = _post(server, "unload_lora_adapter", {"lora_name": "live"})
    assert unloaded.status_code == 200 and "removed successfully" in unloaded.text
    gone = _post(server, "completions", {"model": "live", "prompt": prompt})
    assert gone.status_code == 404
    assert _post(server, "unload_lora_adapter", {"lora_name": "live"}).status_code == 404


def test_replacing_in_place_refuses_no_request_in_between(server, adapters, offline):
    """Requests for the adapter keep coming while it is swapped back and forth: each one
    is served by the old or the new weights, none is refused; a bad replacement leaves
    the adapter serving."""
    prompt = PROMPTS[2]
    assert (
        _post(
            server, "load_lora_adapter", {"lora_name": "swap", "lora_path": str(adapters[0])}
        ).status_code
        == 200
    )
    texts = {offline[("sql", prompt)], offline[("other", prompt)]}

    async def run() -> list[str]:
        client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0)
        stop = asyncio.Event()

        async def ask() -> list[str]:
            seen = []
            while not stop.is_set():
                done = await client.completions.create(model="swap", prompt=prompt, **GREEDY)
                seen.append(done.choices[0].text)
            return seen

        askers = [asyncio.create_task(ask()) for _ in range(6)]
        async with httpx.AsyncClient(timeout=60) as http:
            for turn in range(6):
                body = {
                    "lora_name": "swap",
                    "lora_path": str(adapters[1 - turn % 2]),
                    "load_inplace": True,
                }
                replaced = await http.post(
                    f"{server.url}/v1/load_lora_adapter", json=body,
                    headers={"Authorization": f"Bearer {API_KEY}"},
                )  # fmt: skip
                assert replaced.status_code == 200, replaced.text
                await asyncio.sleep(0.3)
            missing = {"lora_name": "swap", "lora_path": "/nonexistent", "load_inplace": True}
            refused = await http.post(
                f"{server.url}/v1/load_lora_adapter", json=missing,
                headers={"Authorization": f"Bearer {API_KEY}"},
            )  # fmt: skip
            assert refused.status_code == 400
        stop.set()
        seen = [text for asker in askers for text in await asker]
        await client.close()
        return seen

    seen = asyncio.run(run())
    assert len(seen) >= 12 and set(seen) <= texts, set(seen) - texts
    after = _post(server, "completions", {"model": "swap", "prompt": prompt, "max_tokens": 2})
    assert after.status_code == 200  # the refused replacement left the adapter serving
    assert _post(server, "unload_lora_adapter", {"lora_name": "swap"}).status_code == 200


def _break(folder):
    (folder / "adapter_model.safetensors").write_bytes(b"not a safetensors file")


def _dora(folder):
    config = {"peft_type": "LORA", "r": 8, "lora_alpha": 16, "use_dora": True}
    (folder / "adapter_config.json").write_text(json.dumps(config))


BAD = [
    # (how to break a copy of a good adapter, what the 400 says)
    (shutil.rmtree, "does not exist"),
    (_break, "truncated or corrupt"),
    (_dora, "DoRA"),
]


def test_bad_adapters_are_refused_while_fifty_streams_keep_decoding(server, adapters, tmp_path):
    """Each refusal is a 400 naming the problem; 50 concurrent streams all finish."""
    big = dict(GREEDY, max_tokens=48)

    async def run() -> None:
        client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0)

        async def stream(model: str) -> int:
            chunks = 0
            response = await client.completions.create(
                model=model, prompt="a long story", stream=True, **big
            )
            async for chunk in response:
                chunks += bool(chunk.choices and chunk.choices[0].text)
            return chunks

        streams = [asyncio.create_task(stream(("tiny", "sql")[i % 2])) for i in range(50)]
        await asyncio.sleep(0.5)
        async with httpx.AsyncClient(timeout=60) as http:
            for index, (breaker, says) in enumerate(BAD):
                folder = tmp_path / f"bad-{index}"
                shutil.copytree(adapters[0], folder)
                breaker(folder)
                response = await http.post(
                    f"{server.url}/v1/load_lora_adapter",
                    json={"lora_name": f"bad-{index}", "lora_path": str(folder)},
                    headers={"Authorization": f"Bearer {API_KEY}"},
                )
                assert response.status_code == 400, response.text
                error = response.json()["error"]
                assert says in error["message"] and error["param"] == "lora_path"
        counts = await asyncio.gather(*streams)
        assert all(count > 0 for count in counts)
        await client.close()

    asyncio.run(run())


def test_lora_metrics(server, client):
    client.completions.create(model="sql", prompt="metrics", **GREEDY)
    metrics = server.metrics()
    info = [key for key in metrics if key.startswith("pagoda:lora_requests_info{")]
    assert len(info) == 1 and 'max_lora="2"' in info[0]
    assert metrics['pagoda:lora_adapter_state{adapter="sql",model_name="tiny",state="gpu"}'] in (
        0.0,
        1.0,
    )
    states = {k: v for k, v in metrics.items() if k.startswith("pagoda:lora_adapter_state{")}
    assert sum(v for k, v in states.items() if 'adapter="sql"' in k) == 1
    loads = 'pagoda:lora_loads_total{adapter="sql",model_name="tiny",tier="cpu"}'
    assert metrics[loads] >= 1


def test_runtime_updates_are_off_unless_asked_for(start_server, adapters):
    server = start_server("--enable-lora", "--max-lora-rank", "16")
    body = {"lora_name": "x", "lora_path": str(adapters[0])}
    response = _post(server, "load_lora_adapter", body, api_key=None)
    assert response.status_code == 404
    assert "--enable-runtime-lora-updating" in response.json()["error"]["message"]
