"""Server-sent events, merged output streams, and aborting work whose client went away:
what the completion and chat endpoints share, from admission to the last byte."""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from pagoda.engine.engine_core.errors import EngineDeadError, RequestFailedError
from pagoda.engine.entrypoints.admission import Ticket
from pagoda.engine.entrypoints.errors import APIError, bad_request, engine_died, request_failed

T = TypeVar("T")

SSE_DONE = "data: [DONE]\n\n"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}  # no proxy buffering


@contextlib.contextmanager
def released_on_error(ticket: Ticket) -> Iterator[None]:
    """Around preparing an admitted request: a failure gives its admission back, and a
    ValueError (a bad prompt or parameter) becomes a 400 that names it."""
    try:
        yield
    except ValueError as exc:
        ticket.release()
        raise bad_request(exc) from None
    except BaseException:
        ticket.release()
        raise


async def respond(
    request: Request,
    ticket: Ticket,
    events: AsyncIterator[str] | None,
    complete: Callable[[], Awaitable[T]],
):
    """The response of an admitted request: the stream of `events` (which releases the
    ticket), or, with none, `complete()` awaited until done or the client leaves."""
    if events is not None:
        return event_stream(events, ticket)
    try:
        return await cancel_on_disconnect(request, complete())
    finally:
        ticket.release()


def event_stream(events: AsyncIterator[str], ticket: Ticket) -> StreamingResponse:
    """An SSE response whose admission ticket is released however it ends.

    The events generator releases it in its `finally`; but when the client is gone before
    the response starts, the generator never runs, so its collection releases it instead.
    """
    weakref.finalize(events, ticket.release)
    return StreamingResponse(events, media_type="text/event-stream", headers=SSE_HEADERS)


def sse(payload: BaseModel | dict) -> str:
    if isinstance(payload, BaseModel):
        return f"data: {payload.model_dump_json()}\n\n"
    import json

    return f"data: {json.dumps(payload)}\n\n"


def sse_error(error: APIError) -> str:
    """An error after the stream began (status 200 is already sent): vLLM's and OpenAI's form."""
    body = {"message": error.message, "type": error.type, "param": error.param, "code": error.code}
    return sse({"error": body})


async def framed(
    events: AsyncIterator[str],
    start_deadline: Callable[[], Any],
    ticket: Ticket,
    usage_event: Callable[[], str | None],
) -> AsyncIterator[str]:
    """The frame every streamed response shares around its own events.

    After them: the deadline's error if it expired, else the usage event (when asked for);
    an engine that died mid-stream becomes an error event; `[DONE]` always ends it; the
    deadline and the admission ticket are released however the stream ends. The deadline
    starts when the stream does (a response whose client left first never starts one).
    """
    deadline = start_deadline()
    try:
        async for event in events:
            yield event
        if deadline.expired:
            yield sse_error(deadline.error())
        elif (usage := usage_event()) is not None:
            yield usage
    except EngineDeadError as exc:
        yield sse_error(engine_died(exc))
    except RequestFailedError as exc:
        yield sse_error(request_failed(exc))
    finally:
        deadline.cancel()
        ticket.release()
        await events.aclose()  # a client that left: abort its requests now, not at GC
    yield SSE_DONE


async def merge(iterators: list[AsyncIterator[T]]) -> AsyncIterator[tuple[int, T]]:
    """Items of several async iterators as they come, tagged with the iterator's index."""
    if len(iterators) == 1:  # the common case needs no tasks
        async for item in iterators[0]:
            yield 0, item
        return
    queue: asyncio.Queue = asyncio.Queue()
    done = object()

    async def pump(index: int, iterator: AsyncIterator[T]) -> None:
        try:
            async for item in iterator:
                await queue.put((index, item))
            await queue.put((index, done))
        except BaseException as exc:  # handed to the consumer, which re-raises it
            await queue.put((index, exc))

    tasks = [asyncio.create_task(pump(i, it)) for i, it in enumerate(iterators)]
    try:
        remaining = len(tasks)
        while remaining:
            index, item = await queue.get()
            if item is done:
                remaining -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield index, item
    finally:  # cancelled or failed: stop (and so abort) every stream still running
        await _cancel(tasks)


async def last(iterator: AsyncIterator[T]) -> T | None:
    """The final item (a whole response needs only the end of the engine's stream)."""
    result = None
    async for item in iterator:
        result = item
    return result


async def gather_or_cancel(coroutines: list[Coroutine[Any, Any, T]]) -> list[T]:
    """asyncio.gather, but one failure or a cancellation cancels every sibling."""
    tasks = [asyncio.ensure_future(coroutine) for coroutine in coroutines]
    try:
        return await asyncio.gather(*tasks)
    finally:
        await _cancel(tasks)


class Deadline:
    """Aborts requests that run past `seconds`; their streams then end with reason abort.

    A timer rather than a cancel scope: a scope around a generator that yields to the HTTP
    layer could fire outside it, while an abort always ends the stream cleanly.
    """

    def __init__(self, abort: Callable[[str], None], request_ids: list[str], seconds) -> None:
        self.seconds = seconds
        self.expired = False
        self._abort = abort
        self._request_ids = request_ids
        self._timer = (
            None
            if seconds is None
            else asyncio.get_running_loop().call_later(seconds, self._expire)
        )

    def _expire(self) -> None:
        self.expired = True
        for request_id in self._request_ids:
            self._abort(request_id)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    async def wait_for(self, work: Awaitable[T]) -> T:
        """A whole (non-streamed) response's work under this deadline: its error if the
        deadline expired, a 503 if the engine died; the timer stops either way."""
        try:
            result = await work
        except EngineDeadError as exc:
            raise engine_died(exc) from None
        except RequestFailedError as exc:
            raise request_failed(exc) from None
        finally:
            self.cancel()
        if self.expired:
            raise self.error()
        return result

    def error(self) -> APIError:
        return APIError(
            408,
            f"the request did not finish within the server's timeout ({self.seconds:g}s): "
            "lower max_tokens or retry",
            type="timeout_error",
        )


async def cancel_on_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Run `work` until it ends or the client disconnects; then cancel it (aborting it)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_for_disconnect(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            await _cancel([task])
    if task.cancelled():
        raise APIError(499, "the client closed the connection")
    return task.result()


async def _wait_for_disconnect(request: Request) -> None:
    # The body was read before the handler ran, so the next message is the disconnect.
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _cancel(tasks: list[asyncio.Future]) -> None:
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(BaseException):
            await task
