"""Request and response bodies of the OpenAI API (and vLLM's extras), as pydantic models.

Types are checked here; value ranges are checked once, by `SamplingParams.validate` and
the input processor, whose ValueErrors name the field and become 400s. The ranges are also
written into the OpenAPI schema (`documented`), so clients and fuzzers see them. The
completion and chat requests keep the fields they do not declare aside (`model_extra`):
request_fields.py refuses those of OpenAI's and vLLM's APIs that ask for something not
served, and ignores names neither API knows, so clients that send newer fields keep
working.
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from pagoda.engine.processing.tokenizer import RESERVED_TEMPLATE_NAMES
from pagoda.engine.sampling_params import MAX_LOGPROBS


def documented(default=None, **schema):
    """A field whose allowed values the OpenAPI schema shows; the engine's checks enforce them."""
    return Field(default, json_schema_extra=schema)


class OpenAIModel(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(OpenAIModel):
    include_usage: bool = False  # a last chunk with the whole request's usage
    # vLLM's: with include_usage, every chunk also carries the usage so far
    continuous_usage_stats: bool = False
    include_obfuscation: bool | None = None  # OpenAI's random padding: refused when true


class JsonSchemaFormat(OpenAIModel):
    """response_format's json_schema: the schema the output must match."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    name: str = documented(..., pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    json_schema: dict | bool = Field(True, alias="schema")  # true: any JSON value
    strict: bool | None = None  # every output matches the schema whatever this says


class ResponseFormat(OpenAIModel):
    """OpenAI's response_format: free text, some JSON object, or JSON of a schema."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None  # required with type json_schema


class StructuredOutputsFields(OpenAIModel):
    """vLLM's structured_outputs: exactly one of json, json_object, regex, choice, grammar."""

    model_config = ConfigDict(extra="forbid")  # vLLM's other options are not served

    json_: dict | bool | str | None = Field(None, alias="json")
    json_object: bool | None = None
    regex: str | None = None
    choice: list[str] | None = documented(minItems=1, items={"type": "string", "minLength": 1})
    grammar: str | None = None  # EBNF: root ::= ...
    disable_any_whitespace: bool = False  # JSON spaced only as ", " and ": "


class SamplingFields(OpenAIModel):
    """What completions and chat share: OpenAI's sampling fields plus vLLM's extras."""

    model: str | None = None  # None: the served model; or a LoRA adapter's name
    lora_name: str | None = None  # vLLM guides' way to pick an adapter (or `model`)
    n: int = documented(1, minimum=1)
    temperature: float | None = documented(minimum=0)  # None: 1.0, as OpenAI
    top_p: float | None = documented(exclusiveMinimum=0, maximum=1)
    stop: str | list[str] | None = None
    seed: int | None = documented(minimum=-(2**63), maximum=2**63 - 1)
    presence_penalty: float = documented(0.0, minimum=-2, maximum=2)
    frequency_penalty: float = documented(0.0, minimum=-2, maximum=2)
    logit_bias: dict[str, float] | None = documented(maxProperties=0)  # not supported yet
    user: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    # vLLM's extras
    top_k: int | None = documented(minimum=-1)  # 0 or -1: off
    min_p: float | None = documented(minimum=0, maximum=1)
    repetition_penalty: float | None = documented(exclusiveMinimum=0)
    ignore_eos: bool = False
    min_tokens: int = documented(0, minimum=0)
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    priority: int = 0  # lower runs first under --scheduling-policy priority
    cache_salt: str | None = None  # keeps this request's prefix-cache entries private
    # sample only these tokens (the served schema bounds the ids by the vocabulary)
    allowed_token_ids: list[int] | None = documented(
        minItems=1, items={"type": "integer", "minimum": 0}
    )
    bad_words: list[str] | None = documented(items={"type": "string", "pattern": r"\S"})
    # keep the prompt's last k tokens; -1: the model's context length
    truncate_prompt_tokens: int | None = documented(minimum=-1, **{"not": {"const": 0}})
    # each prompt token's logprob (and this many alternatives), in `prompt_logprobs`
    prompt_logprobs: int | None = documented(minimum=0, maximum=MAX_LOGPROBS)
    # structured outputs: at most one of these (engine/structured_output/)
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputsFields | None = None
    guided_json: dict | bool | str | None = None  # vLLM's older names of structured_outputs
    guided_regex: str | None = None
    guided_choice: list[str] | None = documented(
        minItems=1, items={"type": "string", "minLength": 1}
    )
    guided_grammar: str | None = None


_TOKEN_IDS = {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}
_PROMPTS = [
    {"type": "string", "minLength": 1},
    {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
    _TOKEN_IDS,
    {"type": "array", "items": _TOKEN_IDS, "minItems": 1},
]


class CompletionRequest(SamplingFields):
    model_config = ConfigDict(extra="allow")  # checked by request_fields.refuse_unsupported

    # text, texts, token ids or lists of them; never empty (the schema says so too)
    prompt: str | list[str] | list[int] | list[list[int]] = documented(..., anyOf=_PROMPTS)
    # 0: nothing generated, with echo or prompt_logprobs (the prompt scored)
    max_tokens: int | None = documented(16, minimum=0)
    logprobs: int | None = documented(minimum=0, maximum=MAX_LOGPROBS)  # top alternatives
    echo: bool = False
    suffix: str | None = documented(maxLength=0)  # not supported yet
    add_special_tokens: bool = True  # vLLM's extra: False leaves out BOS and the like
    best_of: int | None = None  # only best_of == n is supported


class ContentPart(OpenAIModel):
    type: str = documented(..., enum=["text"])  # text only, checked with a clear message
    text: str | None = None


class ToolCallFunction(OpenAIModel):
    name: str
    arguments: str  # JSON, as OpenAI sends it


class ToolCall(OpenAIModel):
    """A tool call an assistant message made earlier in the conversation."""

    id: str
    type: Literal["function"] = "function"
    function: ToolCallFunction


def _required_when(role_values: list[str], *names: str, non_null: bool = True) -> dict:
    """JSON Schema: messages of these roles must have these fields (not null)."""
    then: dict = {"required": list(names)}
    if non_null:
        then["properties"] = {name: {"not": {"type": "null"}} for name in names}
    return {"if": {"properties": {"role": {"enum": role_values}}}, "then": then}


# What conversation.py checks, in the schema too, so clients and fuzzers see the rules.
_MESSAGE_RULES = {
    "allOf": [
        _required_when(["system", "developer", "user", "tool"], "content"),
        _required_when(["tool"], "tool_call_id"),
        {
            "if": {"properties": {"role": {"enum": ["assistant"]}}},
            "then": {"anyOf": [
                {"required": ["content"], "properties": {"content": {"not": {"type": "null"}}}},
                {"required": ["tool_calls"], "properties": {"tool_calls": {"minItems": 1}}},
            ]},
            "else": {"properties": {"tool_calls": {"type": "null"}}},
        },
    ]
}  # fmt: skip


class ChatMessage(OpenAIModel):
    """One message; conversation.py checks its role's rules (written in the schema too)."""

    model_config = ConfigDict(extra="ignore", json_schema_extra=_MESSAGE_RULES)

    role: str = documented(..., enum=["system", "developer", "user", "assistant", "tool"])
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None  # an assistant's earlier calls
    tool_call_id: str | None = None  # a tool message: the call it answers


class ChatTemplateFields(OpenAIModel):
    """vLLM's fields for rendering the conversation (chat and /tokenize)."""

    model_config = ConfigDict(
        extra="ignore",
        json_schema_extra={  # continuing the last message opens no new one
            "if": {"properties": {"continue_final_message": {"const": True}},
                   "required": ["continue_final_message"]},
            "then": {"properties": {"add_generation_prompt": {"const": False}},
                     "required": ["add_generation_prompt"]},
        },
    )  # fmt: skip

    add_generation_prompt: bool = True  # end with the assistant's turn opened
    # the last (assistant) message is left open, for the model to continue it
    continue_final_message: bool = False
    # a Jinja template instead of the model's (the server needs --trust-request-chat-template)
    chat_template: str | None = None
    chat_template_kwargs: dict | None = documented(  # more variables for the template
        propertyNames={"not": {"enum": sorted(RESERVED_TEMPLATE_NAMES)}}
    )


class FunctionDefinition(OpenAIModel):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's rule
    description: str | None = None
    # the arguments' JSON schema; None: a function without arguments
    parameters: dict | None = None
    strict: bool | None = None  # forced calls match the schema whatever this says


class ChatTool(OpenAIModel):
    """A function the model may call."""

    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(OpenAIModel):
    name: str


class NamedToolChoice(OpenAIModel):
    """tool_choice naming the function the model must call."""

    type: Literal["function"]
    function: NamedFunction


class ChatCompletionRequest(ChatTemplateFields, SamplingFields):
    model_config = ConfigDict(extra="allow")  # checked by request_fields.refuse_unsupported

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = documented(minimum=1)  # None: up to the model's context
    # OpenAI's newer name; wins over max_tokens
    max_completion_tokens: int | None = documented(minimum=1)
    logprobs: bool = False
    top_logprobs: int | None = documented(minimum=0, maximum=MAX_LOGPROBS)
    # functions the model may call (engine/entrypoints/tool_calls.py)
    tools: list[ChatTool] | None = None
    # none, auto (needs --enable-auto-tool-choice), required, or one named function;
    # None: auto with tools, none without, as OpenAI
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None  # false: at most one call; None: any number


class TokenizeCompletionRequest(OpenAIModel):
    model: str | None = None
    prompt: str
    add_special_tokens: bool = True


class TokenizeChatRequest(ChatTemplateFields):
    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ChatTool] | None = None  # rendered by the template, as in chat


class DetokenizeRequest(OpenAIModel):
    model: str | None = None
    tokens: list[int]


# -- responses --------------------------------------------------------------------------


def now_seconds() -> int:
    return int(time.time())


class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0  # prompt tokens whose KV came from the prefix cache


class UsageInfo(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None

    @classmethod
    def counting(cls, num_prompt: int, num_generated: int, num_cached: int = 0) -> UsageInfo:
        return cls(
            prompt_tokens=num_prompt,
            completion_tokens=num_generated,
            total_tokens=num_prompt + num_generated,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=num_cached),
        )


class CompletionLogprobs(BaseModel):
    text_offset: list[int] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    tokens: list[str] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)


class PromptLogprob(BaseModel):
    """One token at one prompt position, as vLLM's `prompt_logprobs` show it."""

    logprob: float
    rank: int  # 1 = the most likely token there
    decoded_token: str


# per prompt token (None for the first): token id (as a string) -> its logprob there
PromptLogprobs = list[dict[str, PromptLogprob] | None]


def _left_out_unless_asked():
    return Field(default=None, exclude_if=lambda value: value is None)


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None  # the stop string or token id that matched
    prompt_logprobs: PromptLogprobs | None = _left_out_unless_asked()


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=now_seconds)
    model: str
    choices: list[CompletionChoice]
    usage: UsageInfo | None = None


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChatLogprobs(BaseModel):
    content: list[TokenLogprob] | None = None


class FunctionCall(BaseModel):
    name: str
    arguments: str  # JSON text


class ToolCallOut(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatResponseMessage(BaseModel):
    role: str = "assistant"
    content: str | None = None
    tool_calls: list[ToolCallOut] = Field(default_factory=list)  # [] as vLLM: none


class DeltaFunctionCall(BaseModel):
    # A call's first delta names it; the arguments' text may follow in pieces.
    name: str | None = Field(default=None, exclude_if=lambda value: value is None)
    arguments: str = ""


class DeltaToolCall(BaseModel):
    index: int  # which call of the message this piece belongs to
    id: str | None = Field(default=None, exclude_if=lambda value: value is None)
    type: Literal["function"] | None = Field(default=None, exclude_if=lambda v: v is None)
    function: DeltaFunctionCall


class ChatChoice(BaseModel):
    index: int
    message: ChatResponseMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=now_seconds)
    model: str
    choices: list[ChatChoice]
    usage: UsageInfo
    prompt_logprobs: PromptLogprobs | None = _left_out_unless_asked()


class DeltaMessage(BaseModel):
    # Left out when empty, as OpenAI's chunks do (the role only in a choice's first chunk).
    role: str | None = Field(default=None, exclude_if=lambda value: value is None)
    content: str | None = Field(default=None, exclude_if=lambda value: value is None)
    tool_calls: list[DeltaToolCall] | None = Field(
        default=None, exclude_if=lambda value: value is None
    )


class ChatChunkChoice(BaseModel):
    index: int
    delta: DeltaMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int = Field(default_factory=now_seconds)
    model: str
    choices: list[ChatChunkChoice]
    usage: UsageInfo | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=now_seconds)
    owned_by: str = "pagoda"
    root: str | None = None
    parent: str | None = None  # a LoRA adapter's base model
    max_model_len: int | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class TokenizeResponse(BaseModel):
    count: int
    max_model_len: int
    tokens: list[int]


class DetokenizeResponse(BaseModel):
    prompt: str


class ErrorInfo(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorInfo


class LoadLoRAAdapterRequest(OpenAIModel):
    """vLLM's body for POST /v1/load_lora_adapter."""

    lora_name: str = Field(min_length=1)
    lora_path: str = Field(min_length=1)
    load_inplace: bool = False  # replace an adapter of that name (its requests finish on it)


class UnloadLoRAAdapterRequest(OpenAIModel):
    """vLLM's body for POST /v1/unload_lora_adapter."""

    lora_name: str = Field(min_length=1)
    lora_int_id: int | None = None  # if given, must be the adapter's id


class LoRAAdapterCard(BaseModel):
    name: str
    id: int
    path: str
    base_model: str
    state: str  # gpu | cpu | loading | disk | failed
    error: str | None = None
    digest: str  # sha256 of adapter_config.json and the weights
    rank: int
    added_at: float  # unix time the server checked and added it
    loaded_at: float | None = None  # unix time its weights were last read into memory


class LoRAAdapterList(BaseModel):
    object: Literal["list"] = "list"
    data: list[LoRAAdapterCard]
    max_loras: int  # GPU slots: adapters one step may use
    max_cpu_loras: int  # adapters kept in host memory
