"""`pagoda serve`: the OpenAI-compatible HTTP server (FastAPI on uvicorn).

The API process handles HTTP, tokenization, detokenization and SSE; the engine core runs
in a process of its own (`--no-engine-process`: a thread). The model loads after the
socket is up, so `/health` answers 503 until the engine has served a warm-up request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse

from pagoda import __version__
from pagoda.engine.config import EngineConfig
from pagoda.engine.entrypoints.errors import APIError, install_error_handlers
from pagoda.engine.entrypoints.logprobs import TokenTexts
from pagoda.engine.entrypoints.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    DetokenizeResponse,
    ErrorResponse,
    LoadLoRAAdapterRequest,
    LoRAAdapterList,
    ModelCard,
    ModelList,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
    TokenizeResponse,
    UnloadLoRAAdapterRequest,
)
from pagoda.engine.entrypoints.serving_chat import create_chat_completion
from pagoda.engine.entrypoints.serving_completion import create_completion
from pagoda.engine.entrypoints.serving_lora import (
    adapter_model_cards,
    list_adapters,
    load_adapter,
    unload_adapter,
)
from pagoda.engine.entrypoints.serving_tokens import detokenize, tokenize
from pagoda.engine.entrypoints.settings import ServerSettings
from pagoda.engine.entrypoints.state import ServerState

logger = logging.getLogger(__name__)

# Documented in the OpenAPI schema, so clients and fuzzers know the error shape.
_ERRORS = {status: {"model": ErrorResponse} for status in (400, 401, 404, 408, 500, 503)}


def build_app(state: ServerState) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI):
        loading = asyncio.create_task(state.start_engine())
        yield
        with contextlib.suppress(BaseException):
            await loading
        state.shutdown()

    app = FastAPI(title="Pagoda", version=__version__, lifespan=lifespan, responses=_ERRORS)
    app.add_middleware(RequestIdHeader)
    install_error_handlers(app)
    app.include_router(_openai_router(state))
    app.include_router(_ops_router(state))
    _name_models_in_schema(app, state.settings.served_model_names, state)
    return app


class RequestIdHeader:
    """Every response carries `X-Request-Id`: the client's own when it sent one (as vLLM
    and OpenAI echo it, so logs on both sides can be matched), else a new one. Plain ASGI,
    not BaseHTTPMiddleware, so streams and client disconnects pass through untouched."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sent = next((v for k, v in scope["headers"] if k == b"x-request-id"), None)
        request_id = sent[:256] if sent else secrets.token_hex(16).encode()

        async def send_with_id(message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k != b"x-request-id"]
                message = {**message, "headers": [*headers, (b"x-request-id", request_id)]}
            await send(message)

        await self.app(scope, receive, send_with_id)


def _name_models_in_schema(app: FastAPI, names: list[str], state: ServerState) -> None:
    """The schema's `model` fields list the served names, its token ids the model's
    vocabulary, and `chat_template` is null unless this server trusts request templates,
    so clients (and fuzzers) know them."""
    default_openapi = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = default_openapi()
            vocab_size = state.engine.config.model_config.vocab_size if state.engine else None
            for component in schema.get("components", {}).get("schemas", {}).values():
                properties = component.get("properties", {})
                model = properties.get("model")
                if model is not None and "anyOf" in model:  # requests' optional `model`
                    model["anyOf"] = [{"type": "string", "enum": names}, {"type": "null"}]
                if vocab_size:
                    for token_ids in _token_id_lists(properties):
                        token_ids["items"]["maximum"] = vocab_size - 1
                template = properties.get("chat_template")
                if template is not None and not state.settings.trust_request_chat_template:
                    properties["chat_template"] = {"type": "null", "title": template.get("title")}
        return app.openapi_schema

    app.openapi = openapi


def _token_id_lists(properties: dict) -> list[dict]:
    """The schemas of the token-id lists among a request's properties."""
    lists = [properties["allowed_token_ids"]] if "allowed_token_ids" in properties else []
    for prompt in properties.get("prompt", {}).get("anyOf", []):
        items = prompt.get("items", {})
        if items.get("type") == "integer":
            lists.append(prompt)
        elif items.get("items", {}).get("type") == "integer":
            lists.append(items)
    return lists


def _openai_router(state: ServerState) -> APIRouter:
    """The /v1 endpoints, behind the API key when one is set."""
    router = APIRouter(prefix="/v1", dependencies=[Depends(_api_key_check(state.settings))])
    texts: dict[str, TokenTexts] = {}

    def token_texts() -> TokenTexts:
        if "cached" not in texts:
            texts["cached"] = TokenTexts(state.require_engine().tokenizer)
        return texts["cached"]

    @router.post("/completions")
    async def completions(body: CompletionRequest, request: Request):
        return await create_completion(body, request, state, token_texts())

    @router.post("/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request):
        return await create_chat_completion(body, request, state, token_texts())

    def model_cards() -> list[ModelCard]:
        settings = state.settings
        base = [
            ModelCard(id=name, root=state.engine_config.model, max_model_len=settings.max_model_len)
            for name in settings.served_model_names
        ]
        return base + adapter_model_cards(state)

    @router.get("/models")
    async def models() -> ModelList:
        return ModelList(data=model_cards())

    @router.get("/models/{model_id:path}")  # ids may hold '/' (org/name), as OpenAI's do
    async def model(model_id: str) -> ModelCard:
        card = next((c for c in model_cards() if c.id == model_id), None)
        if card is None:
            raise state.unknown_model("model", model_id)
        return card

    # As vLLM: the run-time endpoints exist (and are in the schema) only when asked for;
    # otherwise a hidden route answers 404 with the flag that turns them on.
    documented = state.settings.runtime_lora_updating

    @router.post(
        "/load_lora_adapter", response_class=PlainTextResponse, include_in_schema=documented
    )
    async def load_lora_adapter(body: LoadLoRAAdapterRequest):
        return await load_adapter(body, state)

    @router.post(
        "/unload_lora_adapter", response_class=PlainTextResponse, include_in_schema=documented
    )
    async def unload_lora_adapter(body: UnloadLoRAAdapterRequest):
        return await unload_adapter(body, state)

    @router.get("/lora_adapters")
    async def lora_adapters() -> LoRAAdapterList:
        return list_adapters(state)

    return router


def _ops_router(state: ServerState) -> APIRouter:
    router = APIRouter()

    @router.get("/health")
    async def health() -> JSONResponse:
        ok, status = state.health()
        return JSONResponse({"status": status}, status_code=200 if ok else 503)

    @router.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @router.get("/version")
    async def version() -> dict[str, str]:
        return {"version": __version__}

    @router.post("/tokenize")
    async def tokenize_route(
        body: TokenizeCompletionRequest | TokenizeChatRequest,
    ) -> TokenizeResponse:
        return tokenize(body, state)

    @router.post("/detokenize")
    async def detokenize_route(body: DetokenizeRequest) -> DetokenizeResponse:
        return detokenize(body, state)

    return router


def _api_key_check(settings: ServerSettings):
    expected = f"Bearer {settings.api_key}".encode() if settings.api_key else None

    async def check(request: Request) -> None:
        if expected is None:
            return
        given = request.headers.get("authorization", "").encode()
        if not secrets.compare_digest(given, expected):  # constant time: no timing oracle
            raise APIError(
                401,
                "missing or wrong API key: send 'Authorization: Bearer <key>'",
                code="invalid_api_key",
                headers={"WWW-Authenticate": "Bearer"},
            )

    return check


def run_server(settings: ServerSettings, engine_config: EngineConfig) -> int:
    """Serve until SIGTERM/SIGINT has drained the server (0), or the engine failed (1)."""
    from pagoda.engine.entrypoints.server import DrainingServer

    state = ServerState(settings, engine_config)
    server = DrainingServer(build_app(state), state)
    state.on_fatal = server.request_exit
    server.run()
    return 1 if state.phase.value == "failed" or state.engine_died else 0
