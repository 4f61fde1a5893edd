"""What the router reads from a body (model, adapter, prompt text, stream), and the
name it gives a request for an adapter whose version rolls."""

from __future__ import annotations

import json

from pagoda.operator.router.engines import EngineSet
from pagoda.operator.router.holding import Holding
from pagoda.operator.router.metrics import RouterMetrics
from pagoda.operator.router.probes import parse_load
from pagoda.operator.router.proxy import Forwarder
from pagoda.operator.router.requests import RoutingInfo, renamed_adapter
from pagoda.operator.router.settings import RoutingSettings


def body(**fields) -> bytes:
    return json.dumps(fields).encode()


def test_completions_and_their_prompt_forms():
    info = RoutingInfo.from_body(body(model="m", prompt="hello", stream=True), chat=False)
    assert (info.model, info.text, info.stream) == ("m", "hello", True)
    assert RoutingInfo.from_body(body(prompt=["a", "b"]), chat=False).text == "a"
    assert RoutingInfo.from_body(body(prompt=[1, 2, 3]), chat=False).text == "1,2,3"
    assert RoutingInfo.from_body(body(prompt=[[7, 8]]), chat=False).text == "7,8"


def test_chat_messages_flatten_with_roles_so_system_prompts_share_a_prefix():
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url"}]},
    ]
    info = RoutingInfo.from_body(body(messages=messages, lora_name="sql"), chat=True)
    assert info.text == "system\x1fbe brief\x1euser\x1fhi\x1e" and info.lora_name == "sql"


def test_bodies_it_cannot_read_are_routed_by_load_alone():
    for raw in (b"not json", b"[1, 2]", body(model=5, prompt={"x": 1})):
        info = RoutingInfo.from_body(raw, chat=False)
        assert info.text == "" and info.model is None and not info.stream


def test_the_load_gauges_are_read_from_prometheus_text():
    text = "\n".join(
        [
            "# HELP pagoda:num_requests_running Requests in the running batch.",
            'pagoda:num_requests_running{model_name="tiny"} 3.0',
            'pagoda:num_requests_waiting{model_name="tiny"} 2.0',
            'pagoda:kv_cache_usage_perc{model_name="tiny"} 0.25',
            'vllm:num_requests_running{model_name="tiny"} 3.0',
            'pagoda:num_requests_running_total{model_name="tiny"} 99',
        ]
    )
    assert parse_load(text) == {"running": 3.0, "waiting": 2.0, "kv_usage": 0.25}
    assert parse_load('vllm:num_requests_waiting{model_name="x"} 4') == {"waiting": 4.0}


def test_a_rolling_adapters_share_of_requests_names_its_new_versions_copy():
    engines = EngineSet()
    engine = engines.upsert("e0", "http://127.0.0.1:1")
    engine.healthy, engine.adapters = True, {"sql": "gpu"}
    forwarder = Forwarder(engines, Holding(engines, 8, 1.0), RouterMetrics(), RoutingSettings(), 1)
    forwarder.adapter_splits = {"sql": ("sql@v2", 25)}
    sent = body(model="sql", lora_name="sql", prompt="p", temperature=0.5)
    # no engine serves the copy yet: every request keeps the adapter's own name
    assert {forwarder._adapter_copy("sql", sent) for _ in range(50)} == {("sql", sent)}
    engine.adapters["sql@v2"] = "gpu"
    picks = [forwarder._adapter_copy("sql", sent) for _ in range(2000)]
    copies = [json.loads(b) for name, b in picks if name == "sql@v2"]
    assert 400 < len(copies) < 600  # 25% of 2000, within 4.5 sigma
    assert copies[0] == {
        "model": "sql@v2",
        "lora_name": "sql@v2",
        "prompt": "p",
        "temperature": 0.5,
    }
    assert all(b == sent for name, b in picks if name == "sql")
    # other adapters and the base model are never renamed
    assert forwarder._adapter_copy("chat", sent) == ("chat", sent)
    assert forwarder._adapter_copy(None, sent) == (None, sent)
    assert renamed_adapter(body(model="base", lora_name="sql"), "sql", "sql@v2") == body(
        model="base", lora_name="sql@v2"
    )
