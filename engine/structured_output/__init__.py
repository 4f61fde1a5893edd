"""Structured outputs: generated text kept inside a JSON schema, a regular expression, a
choice of strings or an EBNF grammar.

xgrammar, the grammar engine vLLM serves with by default, compiles each constraint against
the tokenizer's vocabulary (its compiler caches by the constraint's text) and a matcher per
request follows the tokens the request generates. Each sampling step, the runner asks the
matcher of every constrained row which tokens may come next — a bitmask of the
vocabulary, filled on the host while the device runs the step's forward, narrowed to the
tokens that keep the output well-formed UTF-8 (utf8.py) — and the sampler sets every other
token's logit to -inf on the device. Unconstrained rows are not
touched, so they sample exactly what they would alone.
"""
