"""Structured outputs on the tiny random-weight Llama, checked by libraries we did not
write: every output under a JSON schema parses (json, strict) and validates (jsonschema),
every regex output matches (re.fullmatch), every choice is one of its strings — greedy and
sampled, with asynchronous scheduling and without, under preemption, and in one batch
with unconstrained requests, which get exactly the tokens they get alone."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from pagoda.engine import LLM, SamplingParams, StructuredOutputsParams
from tests.engine.structured_output.schemas import SCHEMAS

MAX_TOKENS = 320  # above the longest output the bounded schemas allow this model
# bounded, as the schemas are; no spaces (the tiny tokenizer's decoder drops them)
REGEXES = [r"[a-z]{3}-[0-9]{2}", r"(yes|no)!", r"\d{4}-\d{2}-\d{2}", r"0x[0-9a-f]{2,8}",
           r"[A-Z][a-z]{1,6}(-[A-Z][a-z]{1,6})?", r"(ab|cd){1,4}e"]  # fmt: skip
CHOICES = [["yes", "no"], ["red", "green", "blue"], ['a-"quoted"-one', "back\\slash", "日本語"]]
GREEDY, SAMPLED = {"temperature": 0}, {"temperature": 1.0, "seed": 11}


@pytest.fixture(scope="module", params=[True, False], ids=["async", "sync"])
def llm(request, llama_dir):
    return LLM(str(llama_dir), async_scheduling=request.param, max_model_len=512)


def constrained(spec: dict, **sampling) -> SamplingParams:
    return SamplingParams(
        max_tokens=MAX_TOKENS, structured_outputs=StructuredOutputsParams(**spec), **sampling
    )


def texts(llm, params: list[SamplingParams], prompt: str = "write the answer as asked") -> list:
    outputs = llm.generate([prompt] * len(params), params)
    return [o.outputs[0] for o in outputs]


def assert_valid_json(text: str, schema) -> None:
    jsonschema.validate(json.loads(text), schema)  # json.loads is strict: no raw controls


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_every_output_under_a_json_schema_validates(llm, sampling):
    assert len(SCHEMAS) >= 30
    outputs = texts(llm, [constrained({"json": schema}, **sampling) for schema in SCHEMAS])
    for schema, output in zip(SCHEMAS, outputs, strict=True):
        assert output.finish_reason == "stop", (schema, output.text)
        assert_valid_json(output.text, schema)


def test_json_object_regex_and_choice_outputs_are_in_their_language(llm):
    # Unbounded, so some reach max_tokens: of six, those that end are JSON objects.
    objects = 6
    params = [
        SamplingParams(max_tokens=500, temperature=1.0, seed=11 + seed, structured_outputs=(
            StructuredOutputsParams(json_object=True)))
        for seed in range(objects)
    ]  # fmt: skip
    params += [constrained({"regex": regex}, **s) for regex in REGEXES for s in (GREEDY, SAMPLED)]
    params += [constrained({"choice": c}, **s) for c in CHOICES for s in (GREEDY, SAMPLED)]
    outputs = texts(llm, params)
    ended = [o.text for o in outputs[:objects] if o.finish_reason == "stop"]
    assert ended and all(isinstance(json.loads(text), dict) for text in ended), ended
    outputs = outputs[objects - 1 :]
    regex_outputs = outputs[1 : 1 + 2 * len(REGEXES)]
    for regex, output in zip([r for r in REGEXES for _ in (0, 1)], regex_outputs, strict=True):
        assert re.fullmatch(regex, output.text), (regex, output.text)
    choice_outputs = outputs[1 + 2 * len(REGEXES) :]
    for choices, output in zip([c for c in CHOICES for _ in (0, 1)], choice_outputs, strict=True):
        assert output.text in choices


def test_an_ebnf_grammar_and_json_without_free_whitespace(llm):
    grammar = 'root ::= "(" [0-9]{1,3} ("," [0-9]{1,3})* ")"'
    numbers = {"type": "array", "items": {"type": "integer"}, "maxItems": 3}
    schema = {"type": "object", "properties": {"a": numbers}, "required": ["a"]}
    compact = {"json": schema, "disable_any_whitespace": True}
    outputs = texts(
        llm, [constrained({"grammar": grammar}, **SAMPLED), constrained(compact, **SAMPLED)]
    )
    assert re.fullmatch(r"\(\d{1,3}(,\d{1,3})*\)", outputs[0].text), outputs[0].text
    assert_valid_json(outputs[1].text, schema)
    # whitespace only as json.dumps separates: ", " and ": "
    assert outputs[1].text == json.dumps(json.loads(outputs[1].text)), outputs[1].text


def test_unconstrained_requests_in_a_constrained_batch_get_their_tokens_alone(llm):
    free = [SamplingParams(max_tokens=24, **GREEDY), SamplingParams(max_tokens=24, **SAMPLED)]
    alone = [o.token_ids for o in texts(llm, free, "a prompt of its own")]
    # constrained rows between unconstrained ones: each mask lands on its own row
    mixed = free[:1] + [constrained({"json": s}, **SAMPLED) for s in SCHEMAS[:6]] + free[1:]
    prompts = ["a prompt of its own"] + ["write the answer as asked"] * 6 + ["a prompt of its own"]
    outputs = llm.generate(prompts, mixed)
    assert [o.outputs[0].token_ids for o in (outputs[0], outputs[7])] == alone
    for schema, output in zip(SCHEMAS[:6], outputs[1:7], strict=True):
        assert_valid_json(output.outputs[0].text, schema)


def test_n_samples_and_preempted_requests_stay_in_the_schema(llama_dir):
    # blocks for a few of these at once: the scheduler preempts and recomputes
    llm = LLM(str(llama_dir), num_kv_blocks=24, max_model_len=512, max_num_batched_tokens=32)
    schema = SCHEMAS[15]  # nested objects
    params = [SamplingParams(n=3, max_tokens=MAX_TOKENS, seed=5, structured_outputs=(
        StructuredOutputsParams(json=schema)))] + [constrained({"json": s}, **SAMPLED)
                                                   for s in SCHEMAS[16:22]]  # fmt: skip
    outputs = llm.generate(["write the answer as asked, at length"] * len(params), params)
    assert llm.engine.core.scheduler.num_preemptions_total > 0
    assert len(outputs[0].outputs) == 3
    for sample in outputs[0].outputs:
        assert_valid_json(sample.text, schema)
    for schema, output in zip(SCHEMAS[16:22], outputs[1:], strict=True):
        assert_valid_json(output.outputs[0].text, schema)


@pytest.mark.parametrize(
    ("spec", "sampling", "message"),
    [
        ({"json": '{"type": "objec"}'}, {}, r"structured_outputs\.json: Unsupported type"),
        ({"json": "{not json"}, {}, r"structured_outputs\.json: Failed to parse JSON"),
        ({"regex": "a(b"}, {}, r"structured_outputs\.regex: .*parenthesis is not closed"),
        ({"grammar": "root ::= foo"}, {}, r'structured_outputs\.grammar: .*"foo" is not defined'),
        ({"choice": []}, {}, r"structured_outputs\.choice=\[\]"),
        ({"regex": "a", "choice": ["a"]}, {}, r"exactly one of .* \(got regex, choice\)"),
        ({}, {}, r"exactly one of .* \(got none\)"),
        ({"regex": "a"}, {"ignore_eos": True}, "invalid ignore_eos"),
        ({"regex": "a"}, {"min_tokens": 2}, "invalid min_tokens=2"),
    ],
    ids=[
        "schema",
        "schema-text",
        "regex",
        "grammar",
        "no-choice",
        "two",
        "none",
        "ignore-eos",
        "min-tokens",
    ],
)
def test_a_constraint_that_cannot_be_served_is_refused_with_what_to_fix(
    llm, spec, sampling, message
):
    params = SamplingParams(structured_outputs=StructuredOutputsParams(**spec), **sampling)
    with pytest.raises(ValueError, match=message):
        llm.generate(["hi"], params)
    assert texts(llm, [SamplingParams(max_tokens=3)])[0].token_ids  # and the engine serves on
