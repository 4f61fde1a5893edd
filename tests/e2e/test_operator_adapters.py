"""spec.adapters on a running InferenceService: real `pagoda serve` engines behind real
routers, PEFT adapters made by peft itself, and a continuous load of base and adapter
requests through the routers that must see no failure while adapters are added, rolled
to a new version (in a Canary's two steps), refused, removed, and while an engine pod is
replaced mid-roll.

Which weights answered is checked by the tokens: each adapter's greedy text is the
offline engine's for that adapter (itself checked against peft in tests/engine); the
new version's copy names itself (`sql@v2`) in the responses it answers mid-roll."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

import openai
import pytest
from kubernetes import client

from e2e import wait_for
from pagoda.engine import LLM, LoRARequest, SamplingParams
from tests.e2e import operator_env as env
from tests.e2e.test_operator_router import pods, ready, router_urls, stats

pytestmark = pytest.mark.e2e

MODEL = "tiny"
PROMPT = "the paged cache"
MAX_TOKENS = 6
GREEDY = {"temperature": 0.0, "max_tokens": MAX_TOKENS, "extra_body": {"ignore_eos": True}}
STARTUP_S = 240
ENGINE_ARGS = ["--max-num-seqs=32", "--no-access-log", "--max-lora-rank=16", "--max-loras=2"]


def adapter(name: str, folder, version: str = "v1") -> dict:
    return {"name": name, "uri": f"hostpath://{folder}", "version": version}


@pytest.fixture(scope="module")
def greedy_texts(llama_dir, peft_adapters) -> dict[str | None, str]:
    """The offline engine's greedy text for PROMPT: the base model (None) and a0..a2."""
    folders = peft_adapters("llama")
    llm = LLM(str(llama_dir), enable_lora=True, max_lora_rank=16)
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    texts = {None: llm.generate([PROMPT], params)[0].outputs[0].text}
    for index in range(3):
        lora = LoRARequest(f"a{index}", index + 1, str(folders[index]))
        texts[f"a{index}"] = llm.generate([PROMPT], params, lora_request=lora)[0].outputs[0].text
    assert len(set(texts.values())) == 4, "the adapters must answer apart"
    return texts


@dataclass
class Load:
    """Requests without pause from four clients, spread over the routers, each for the
    next model of `models` (changed as the test goes); every answer is kept."""

    urls: list[str]
    models: list[str]
    # the model asked for, when, the text, and the model the response names
    answers: list[tuple[str, float, str, str]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> Load:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()
        wait_for(lambda: len(self.answers) >= 8, "the load under way", 60)
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join(120)

    async def _run(self) -> None:
        await asyncio.gather(*(self._client(i) for i in range(4)))

    async def _client(self, index: int) -> None:
        aio = [
            openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)
            for url in self.urls
        ]
        turn = index
        while not self._stop.is_set():
            turn += 1
            model = self.models[turn % len(self.models)]
            sent = time.monotonic()
            try:
                done = await aio[turn % len(aio)].completions.create(
                    model=model, prompt=PROMPT, **GREEDY
                )
                self.answers.append((model, sent, done.choices[0].text, done.model))
            except openai.APIError as exc:
                self.failures.append(f"{model}: {exc}")

    def texts(self, model: str, after: float = 0.0, before: float = float("inf")) -> set[str]:
        return {t for m, sent, t, _ in self.answers if m == model and after <= sent < before}

    def answered_by(self, model: str) -> dict[str, set[str]]:
        """{the model each response names: its texts} for requests for `model`."""
        found: dict[str, set[str]] = {}
        for asked, _, text, named in self.answers:
            if asked == model:
                found.setdefault(named, set()).add(text)
        return found


def adapters_ready(api, namespace: str, name: str, generation: int, versions: dict) -> dict:
    """The InferenceService once AdaptersReady is True for `generation` with each adapter
    at its version on every engine pod and no roll under way."""

    def check():
        resource = env.get(api, namespace, name)
        condition = env.condition(resource, "AdaptersReady")
        fresh = condition.get("observedGeneration", 0) >= generation
        listed = {
            a["name"]: a["version"]
            for a in resource.get("status", {}).get("adapters") or []
            if a["loaded"] == len(a["pods"]) >= 1 and not a.get("roll")
        }
        ok = fresh and condition.get("status") == "True" and listed == versions
        return ok and resource

    return wait_for(check, f"adapters {versions} loaded (generation {generation})", 120)


def sql_roll(api, namespace: str) -> dict | None:
    adapters = env.get(api, namespace, "loras").get("status", {}).get("adapters") or []
    return next((a.get("roll") for a in adapters if a["name"] == "sql"), None)


def engine_adapters(urls: list[str]) -> dict[str, set[str]]:
    """{engine pod: adapters it serves}, as the first router reads the engines' lists."""
    return {
        e["name"]: {a for a, state in e["adapters"].items() if state in ("gpu", "cpu", "disk")}
        for e in stats(urls[0])["engines"]
        if e["routable"]
    }


def test_adapters_added_rolled_refused_and_removed_under_load_fail_no_request(
    api, real_engines, namespace, peft_adapters, greedy_texts
):
    folders = peft_adapters("llama")
    spec = {
        "model": {"uri": "hostpath:///var/lib/models/tiny", "servedName": MODEL},
        "engine": {"maxModelLen": 512, "args": ENGINE_ARGS},
        "replicas": 2,
        "template": env.backed("pagoda-serve"),
        "router": env.routed(),
        "adapters": [adapter("sql", folders[0])],
        # adapter versions roll in these steps (the model revision stays)
        "rollout": {"strategy": "Canary", "steps": [
            {"weight": 50, "pauseSeconds": 8}, {"weight": 100, "pauseSeconds": 0},
        ]},
    }  # fmt: skip
    env.create(api, namespace, env.isvc("loras", **spec))
    env.wait_ready(api, namespace, "loras", timeout_s=STARTUP_S)
    adapters_ready(api, namespace, "loras", 1, {"sql": "v1"})
    urls = router_urls(api, namespace, "loras", routable=2)
    wait_for(
        lambda: all(a == {"sql"} for a in engine_adapters(urls).values()), "routers see sql", 10
    )
    core = client.CoreV1Api(api)

    with Load(urls, [MODEL, "sql"]) as load:
        # added: loaded into both running engines, no pod restarted
        before = {p.metadata.uid for p in pods(api, namespace, "loras", "engine")}
        patch = {"spec": {"adapters": [adapter("sql", folders[0]), adapter("chat", folders[1])]}}
        env.patch(api, namespace, "loras", patch)
        adapters_ready(api, namespace, "loras", 2, {"sql": "v1", "chat": "v1"})
        assert {p.metadata.uid for p in pods(api, namespace, "loras", "engine")} == before
        wait_for(lambda: len(engine_adapters(urls)) == 2 and all(
            a == {"sql", "chat"} for a in engine_adapters(urls).values()
        ), "routers see chat", 10)  # fmt: skip
        load.models.append("chat")

        # rolled to a new folder, one engine pod deleted mid-roll: its replacement loads
        # every copy before it is Ready; answers move from a0's to a2's through a step
        # that sends half of sql's requests to the new version's copy, sql@v2
        rolled = [adapter("sql", folders[2], "v2"), adapter("chat", folders[1])]
        roll_started = time.monotonic()
        env.patch(api, namespace, "loras", {"spec": {"adapters": rolled}})
        victim = pods(api, namespace, "loras", "engine")[0].metadata.name
        core.delete_namespaced_pod(victim, namespace)
        shifting = wait_for(lambda: (roll := sql_roll(api, namespace)) and roll["phase"] in (
            "Shifting", "Promoting", "Retiring") and roll, "sql v2 gets traffic", 120)  # fmt: skip
        assert shifting["stagedAs"] == "sql@v2", shifting
        adapters_ready(api, namespace, "loras", 3, {"sql": "v2", "chat": "v1"})
        env.wait_ready(api, namespace, "loras", generation=3, timeout_s=STARTUP_S)
        wait_for(lambda: len(engine_adapters(urls)) == 2, "two engines routable again", 60)
        rolled_at = time.monotonic()
        time.sleep(3)  # answers after the roll
        engines = pods(api, namespace, "loras", "engine")
        replacement = next(
            p for p in engines if p.metadata.name != victim and p.metadata.uid not in before
        )
        gate = next(
            c
            for c in replacement.status.conditions
            if c.type == "serving.pagoda.dev/adapters-loaded"
        )
        assert gate.status == "True" and ready(replacement)

        # refused: a folder that holds no adapter is reported, the rest keeps serving
        broken = [*rolled, adapter("broken", folders[0].parent / "missing")]
        env.patch(api, namespace, "loras", {"spec": {"adapters": broken}})
        degraded = wait_for(
            lambda: (
                (r := env.get(api, namespace, "loras"))
                and env.condition(r, "Degraded").get("reason") == "AdapterLoadFailed"
                and r
            ),
            "Degraded AdapterLoadFailed",
            60,
        )
        message = env.condition(degraded, "Degraded")["message"]
        assert "adapter broken v1" in message and "does not exist" in message, message
        assert env.condition(degraded, "AdaptersReady")["reason"] == "AdapterLoadFailed"
        assert env.condition(degraded, "Ready")["status"] == "True"
        wait_for(
            lambda: "AdapterLoadFailed" in env.event_reasons(api, namespace, "loras"),
            "the AdapterLoadFailed Event",
            30,
        )

        # removed: chat leaves the load first, then the spec; the engines unload it
        load.models.remove("chat")
        time.sleep(1)  # the last chat requests are answered
        env.patch(api, namespace, "loras", {"spec": {"adapters": rolled[:1]}})
        adapters_ready(api, namespace, "loras", 5, {"sql": "v2"})
        recovered = env.get(api, namespace, "loras")
        assert env.condition(recovered, "Degraded")["status"] == "False"
        wait_for(
            lambda: all(a == {"sql"} for a in engine_adapters(urls).values()),
            "chat unloaded from every engine",
            10,
        )

    assert load.failures == [], load.failures[:5]
    assert len(load.answers) > 100
    assert load.texts(MODEL) == {greedy_texts[None]}
    assert load.texts("chat") == {greedy_texts["a1"]}
    assert load.texts("sql", before=roll_started) == {greedy_texts["a0"]}
    assert load.texts("sql", after=rolled_at) == {greedy_texts["a2"]}
    assert load.texts("sql") == {greedy_texts["a0"], greedy_texts["a2"]}
    # mid-roll the new version's copy answered some of sql's requests, with a2's weights
    by = load.answered_by("sql")
    assert by.get("sql@v2") == {greedy_texts["a2"]}, by
    assert set(by) == {"sql", "sql@v2"}
    assert "AdapterRolled" in env.event_reasons(api, namespace, "loras")
    assert "AdapterLoaded" in env.event_reasons(api, namespace, "loras")
