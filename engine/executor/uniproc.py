"""N = 1: the model runner in this process, called directly (no copies, no messages)."""

from __future__ import annotations

from typing import Any

from pagoda.engine.config import EngineConfig
from pagoda.engine.executor.base import Executor
from pagoda.engine.messages import SchedulerOutput
from pagoda.engine.runner.pending_output import PendingOutput


class UniprocExecutor(Executor):
    def __init__(self, config: EngineConfig) -> None:
        from pagoda.engine.runner.model_runner import ModelRunner

        super().__init__(config)
        self.runner = ModelRunner(config)

    def collective_rpc(self, method: str, *args: Any) -> list[Any]:
        return [getattr(self.runner, method)(*args)]

    def execute(self, scheduled: SchedulerOutput) -> PendingOutput:
        return self.runner.execute(scheduled)
