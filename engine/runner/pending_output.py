"""A launched step's results, read back from the device only when the engine asks.

`execute()` returns one of these as soon as a step's kernels are queued. Under
asynchronous scheduling the engine launches the next step before calling `result()` on
this one, so the host's work for step N+1 overlaps the device's work for step N; the next
step takes this step's tokens from `token_ids` on the device.
"""

from __future__ import annotations

from pagoda.engine.layers.sampler import SampledOnHost, SamplerOutput
from pagoda.engine.messages import ModelRunnerOutput
from pagoda.engine.runner.input_batch import RequestState
from pagoda.engine.runner.prompt_logprobs import PromptLogprobsTensors


class PendingOutput:
    """A step whose output is known at once: it sampled nothing, or ran on another rank
    (but it may have scored prompt tokens, read back when asked)."""

    def __init__(
        self,
        output: ModelRunnerOutput | None = None,
        prompt: PromptLogprobsTensors | None = None,
    ) -> None:
        self._output = output
        self._prompt = prompt

    def result(self) -> ModelRunnerOutput:
        if self._output is None:
            self._output = ModelRunnerOutput()
            self._add_prompt_logprobs(self._output)
        return self._output

    def _add_prompt_logprobs(self, output: ModelRunnerOutput) -> None:
        if self._prompt is not None:
            output.prompt_logprobs = self._prompt.by_request()


class SampledStep(PendingOutput):
    """The tokens a step sampled, one per row of `states`, on their way to the host.

    Until `result()` each of those requests counts the token as pending; `result()` (which
    waits for the device once, and may be called again) appends it to the request.
    """

    def __init__(
        self,
        states: list[RequestState],
        sampled: SamplerOutput,
        prompt: PromptLogprobsTensors | None = None,
    ) -> None:
        super().__init__(None, prompt)
        self.states = states
        self.token_ids = sampled.token_ids  # [rows] on the device
        self._rows = {state.request_id: row for row, state in enumerate(states)}
        self._host = SampledOnHost(sampled)
        for state in states:
            state.num_pending += 1

    def row_of(self, state: RequestState) -> int:
        """The row that sampled `state`'s pending token."""
        row = self._rows.get(state.request_id)
        if row is None or self.states[row] is not state:
            raise RuntimeError(
                f"request {state.request_id} waits for a token the last step did not sample"
            )
        return row

    def result(self) -> ModelRunnerOutput:
        if self._output is None:
            token_ids, logprobs = self._host.wait()
            output = ModelRunnerOutput()
            for row, state in enumerate(self.states):
                token_id = token_ids[row]
                state.token_ids.append(token_id)
                state.num_pending -= 1
                output.sampled_token_ids[state.request_id] = token_id
                if row in logprobs:
                    output.logprobs[state.request_id] = logprobs[row]
            self._add_prompt_logprobs(output)
            self._output = output
        return self._output
