"""OpenAI's error JSON for every failure: a client mistake is a 4xx that says what to fix.

`{"error": {"message": ..., "type": ..., "param": ..., "code": ...}}`, as the OpenAI API
answers. Only a bug in the server is a 500, and it is logged with its traceback.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

logger = logging.getLogger(__name__)

INVALID_REQUEST = "invalid_request_error"
_MAX_REPORTED_ERRORS = 3
# SamplingParams and the input processor start their messages with "invalid NAME=".
_PARAM_IN_MESSAGE = re.compile(r"^invalid (\w+)=")
# pydantic names the member of a union a value failed in its path ("literal['none']",
# "NamedToolChoice", "list[ContentPart]"); the client wrote no such field.
_UNION_MEMBER = re.compile(
    r"^(str|int|float|bool|dict|list|literal|function-\w+|[A-Z]\w*)(\[.*\])?$"
)


class APIError(Exception):
    def __init__(
        self,
        status_code: int,
        message: str,
        type: str = INVALID_REQUEST,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = dict(headers or {})


def bad_request(exc: ValueError) -> APIError:
    """A ValueError from the engine's checks, as a 400 naming the field when it can."""
    message = str(exc)
    match = _PARAM_IN_MESSAGE.match(message)
    return APIError(400, message, param=match.group(1) if match else None)


def engine_died(exc: Exception) -> APIError:
    return APIError(503, f"the engine died ({exc}); this server must restart", type="server_error")


def request_failed(exc: Exception) -> APIError:
    """The engine could not serve this request (its adapter failed to load after it was
    checked): a server-side failure the message names, not a bug."""
    return APIError(500, f"{exc}", type="server_error", code="adapter_load_failed")


def error_response(error: APIError) -> JSONResponse:
    body = {
        "error": {
            "message": error.message,
            "type": error.type,
            "param": error.param,
            "code": error.code,
        }
    }
    return JSONResponse(body, status_code=error.status_code, headers=error.headers)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(APIError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)


async def _api_error(_: Request, exc: APIError) -> JSONResponse:
    return error_response(exc)


async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
    return error_response(validation_error(exc.errors()))


def validation_error(errors) -> APIError:
    """pydantic's errors as one message: which field, what was wrong."""
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        detail = first.get("ctx", {}).get("error", "")
        return APIError(400, f"the request body is not valid JSON: {detail}")
    if first.get("type") == "missing" and tuple(first.get("loc", ())) == ("body",):
        return APIError(400, "the request body is missing: send a JSON object")
    parts = [_describe(error) for error in errors[:_MAX_REPORTED_ERRORS]]
    if len(errors) > _MAX_REPORTED_ERRORS:
        parts.append(f"and {len(errors) - _MAX_REPORTED_ERRORS} more")
    param = _field(first) or None
    return APIError(400, "invalid request: " + "; ".join(parts), param=param)


def _describe(error: Mapping) -> str:
    field = _field(error)
    return f"{field}: {error.get('msg', 'invalid')}" if field else str(error.get("msg"))


def _field(error: Mapping) -> str:
    """The field as the client wrote it: `messages[0].content`, not pydantic's path."""
    path = ""
    for part in error.get("loc", ()):
        if part == "body" or (isinstance(part, str) and _UNION_MEMBER.match(part)):
            continue
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
    message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    return error_response(APIError(exc.status_code, message, headers=exc.headers))


async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unexpected error serving %s %s", request.method, request.url.path)
    return error_response(APIError(500, "internal server error", type="server_error"))
