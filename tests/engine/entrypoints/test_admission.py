"""The admission limit in isolation: counting, refusing, and never losing a place."""

from __future__ import annotations

import asyncio
import gc

import pytest

from pagoda.engine.entrypoints.admission import Admission
from pagoda.engine.entrypoints.errors import APIError
from pagoda.engine.entrypoints.streaming import event_stream


def test_sequences_are_counted_until_released():
    admission = Admission(limit=4)
    first, second = admission.acquire(3), admission.acquire(1)
    with pytest.raises(APIError) as refused:
        admission.acquire(1)
    assert refused.value.status_code == 503 and refused.value.headers["Retry-After"] == "1"
    first.release()
    first.release()  # idempotent
    assert admission.num_seqs == 1 and admission.num_requests == 1
    admission.acquire(3)
    second.release()
    assert admission.num_seqs == 3


def test_a_request_larger_than_the_limit_is_a_client_mistake():
    with pytest.raises(APIError) as refused:
        Admission(limit=4).acquire(5)
    assert refused.value.status_code == 400 and refused.value.param == "n"


def test_wait_idle_returns_when_the_last_request_leaves():
    admission = Admission(limit=4)
    ticket = admission.acquire(2)

    async def main():
        asyncio.get_running_loop().call_later(0.1, ticket.release)
        assert not await admission.wait_idle(0.02)
        assert await admission.wait_idle(5)

    asyncio.run(main())


def test_a_stream_that_never_starts_still_gives_its_place_back():
    admission = Admission(limit=1)
    ticket = admission.acquire(1)

    async def events():
        try:
            yield "data: x\n\n"
        finally:
            ticket.release()

    response = event_stream(events(), ticket)  # the client left before it was sent
    del response
    gc.collect()
    assert admission.num_seqs == 0
