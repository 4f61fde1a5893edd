"""The structured-outputs throughput workload: a share of the requests under a JSON schema.

The constrained requests end when their JSON does, so their lengths differ from the
unconstrained ones'. The peer run, in the same process, sends the same prompts with no
constraint and each request's length fixed to what it generated under the mixed run: both
runs produce exactly the same number of tokens per request, and the ratio of their output
rates is the cost of the grammars (the masks, the host syncs they need, the smaller
batches they leave nothing to).
"""

from __future__ import annotations

import json
import time

from pagoda.engine import LLM, SamplingParams, StructuredOutputsParams

# Bounded in every dimension (integer ranges, string lengths, item counts), so every
# output ends well inside --output-len.
SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": 999999},
        "name": {"type": "string", "minLength": 1, "maxLength": 48},
        "kind": {"enum": ["order", "refund", "query"]},
        "tags": {
            "type": "array",
            "items": {"type": "string", "maxLength": 16},
            "minItems": 1,
            "maxItems": 12,
        },
        "address": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 32},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
            },
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
        "urgent": {"type": "boolean"},
    },
    "required": ["id", "name", "kind", "tags", "address", "urgent"],
    "additionalProperties": False,
}


def pagoda_structured_throughput(
    llm: LLM, prompts: list[list[int]], output_len: int, share: float
) -> dict:
    """Output tok/s with every round(1/share)-th request under SCHEMA, against the same
    requests unconstrained at the same lengths; and whether each constrained output parsed
    and matched the schema."""
    step = max(1, round(1 / share))
    constrained = set(range(0, len(prompts), step))
    schema = StructuredOutputsParams(json=SCHEMA)
    params = [
        SamplingParams(temperature=0.0, max_tokens=output_len, structured_outputs=schema)
        if index in constrained
        else SamplingParams(temperature=0.0, max_tokens=output_len, ignore_eos=True)
        for index in range(len(prompts))
    ]
    warm = SamplingParams(temperature=0.0, max_tokens=16, structured_outputs=schema)
    llm.generate(prompts[:16], warm)  # compiles the schema once
    mixed, outputs = _timed_run(llm, prompts, params)
    lengths = [len(output.outputs[0].token_ids) for output in outputs]
    same = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in lengths]
    unconstrained, _ = _timed_run(llm, prompts, same)
    samples = [outputs[index].outputs[0] for index in sorted(constrained)]
    stopped = [sample.text for sample in samples if sample.finish_reason == "stop"]
    return {
        "mixed": mixed,
        "unconstrained_same_lengths": unconstrained,
        "constrained_requests": len(constrained),
        "constrained_mean_output_tokens": sum(lengths[i] for i in constrained) / len(constrained),
        # the others reached --output-len before their JSON ended (and cannot parse)
        "constrained_outputs_ended": len(stopped),
        "constrained_ended_outputs_valid": sum(map(_valid, stopped)),
        "output_tokens_per_s_vs_unconstrained": (
            mixed["output_tokens_per_s"] / unconstrained["output_tokens_per_s"]
        ),
    }


def _timed_run(llm: LLM, prompts, params) -> tuple[dict, list]:
    started = time.perf_counter()
    outputs = llm.generate(prompts, params)
    elapsed = time.perf_counter() - started
    generated = sum(len(output.outputs[0].token_ids) for output in outputs)
    return {
        "requests": len(prompts),
        "elapsed_s": elapsed,
        "output_tokens": generated,
        "output_tokens_per_s": generated / elapsed,
    }, outputs


def _valid(text: str) -> bool:
    import jsonschema

    try:
        jsonschema.validate(json.loads(text), SCHEMA)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True
