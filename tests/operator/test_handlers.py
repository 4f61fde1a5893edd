"""The kopf registrations: which handlers exist and what they make kopf do."""

from __future__ import annotations

import kopf

from pagoda.operator import handlers


def test_no_handler_puts_a_finalizer_on_inference_services():
    # a finalizer would leave InferenceServices undeletable while the operator is down;
    # the autoscaler's, adapters' and rollouts' daemons end themselves when their InferenceService
    # is gone
    registry = kopf.get_default_registry()
    spawning = registry._spawning.get_all_handlers()
    assert [h.fn for h in spawning] == [
        handlers.autoscale,
        handlers.sync_adapters,
        handlers.roll_out,
    ]
    assert not any(h.requires_finalizer for h in spawning)
    assert not any(h.requires_finalizer for h in registry._changing.get_all_handlers())
