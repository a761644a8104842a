"""The HTTP routes of ``hecate serve`` (FastAPI; the ``serve`` extra).

- ``POST /v1/completions``: OpenAI's completions API (`models.serve.protocol`); with
  ``"stream": true`` the answer is server-sent events, ``data: {chunk}`` per piece of text,
  the last chunk with its ``finish_reason``, then ``data: [DONE]``.
- ``GET /v1/models`` and ``GET /v1/models/{id}``: the one model, so OpenAI clients can list it.
- ``GET /health``: status, the model, the caps and the batching counters (503 while shutting
  down, so a load balancer stops sending requests).
- ``GET /``: the web page (`page.html`, package data).

Every error is OpenAI's shape ``{"error": {"message", "type", "param", "code"}}``. A client
that goes away has its request cancelled: a stream when a write to it fails, a plain request
when its connection closes while it waits.
"""
from __future__ import annotations

import asyncio
import contextlib
import importlib.resources
import json
from typing import Any, AsyncIterator, Optional

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import protocol
from .batcher import Batcher, ServerBusy, ServerClosing
from .jobs import Job
from .protocol import Limits, RequestError, error_body


def page_html() -> str:
    """The web page shipped with the package."""
    return importlib.resources.files("models.serve").joinpath("page.html").read_text("utf-8")


def _error(status: int, message: str, kind: str = "invalid_request_error",
           param: Optional[str] = None, code: Optional[str] = None) -> JSONResponse:
    return JSONResponse(error_body(message, kind, param, code), status_code=status)


def _sse(obj: Any) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


class _JobStream(StreamingResponse):
    """A streamed answer whose job is cancelled however the response ends (finished, client
    gone, server stopping): a no-op for a job that already finished."""

    def __init__(self, job: Job, content: AsyncIterator[str]) -> None:
        super().__init__(content, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self.job = job

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.job.cancel()


async def _read_body(request: Request, limit: int) -> bytes:
    """The request body, refused (413) past `limit` bytes without reading it all."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise RequestError(f"the request body is {int(declared)} bytes; this server reads at "
                           f"most {limit} (see --max-prompt-bytes)", None, "body_too_large", 413)
    parts, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise RequestError(f"the request body is over {limit} bytes; this server reads "
                               f"at most that (see --max-prompt-bytes)", None, "body_too_large",
                               413)
        parts.append(part)
    return b"".join(parts)


async def _client_gone(request: Request) -> None:
    """Returns when the client disconnects (the request body was already read)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def create_app(batcher: Batcher, model_name: str, limits: Limits = Limits(),
               info: Optional[dict] = None) -> FastAPI:
    """The application serving `batcher`'s model under `model_name`. Its lifespan starts and
    stops the decode thread. `info` (e.g. the run directory, the config) is shown by
    ``/health``."""

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):
        batcher.start()
        try:
            yield
        finally:
            batcher.close()

    app = FastAPI(title="hecate serve", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    created = protocol.now()
    page = page_html()
    model_card = {"id": model_name, "object": "model", "created": created, "owned_by": "hecate"}

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return _error(exc.status_code, str(exc.detail), kind)

    @app.exception_handler(Exception)
    async def unexpected(_request: Request, exc: Exception) -> JSONResponse:
        return _error(500, f"internal error: {type(exc).__name__}: {exc}", "server_error")

    @app.get("/", response_class=HTMLResponse)
    async def index() -> HTMLResponse:
        return HTMLResponse(page)

    @app.get("/favicon.ico")
    async def favicon() -> Response:
        return Response(status_code=204)

    @app.get("/health")
    async def health() -> JSONResponse:
        body = {"status": "shutting_down" if batcher.closing else "ok",
                "model": {"id": model_name, **(info or {})},
                "limits": {"max_tokens_cap": limits.max_tokens_cap,
                           "max_prompt_bytes": limits.max_prompt_bytes},
                "batching": batcher.stats()}
        return JSONResponse(body, status_code=503 if batcher.closing else 200)

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [model_card]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> JSONResponse:
        if model_id != model_name:
            return _error(404, f"model {model_id!r} does not exist; this server has "
                               f"{model_name!r}", "not_found_error", "model", "model_not_found")
        return JSONResponse(model_card)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        try:
            raw = await _read_body(request, limits.max_body_bytes)
            try:
                body = json.loads(raw)
            except json.JSONDecodeError as e:
                raise RequestError(f"the request body is not valid JSON: {e.msg} at line "
                                   f"{e.lineno} column {e.colno}", None, "invalid_json") from None
            except UnicodeDecodeError:
                raise RequestError("the request body is not UTF-8 text", None,
                                   "invalid_json") from None
            except RecursionError:
                raise RequestError("the request body nests its JSON too deeply to read", None,
                                   "invalid_json") from None
            except ValueError as e:   # an integer literal past Python's digit limit
                raise RequestError(f"the request body is not valid JSON: {e}", None,
                                   "invalid_json") from None
            req = protocol.parse_completion(body, limits)
        except RequestError as e:
            return JSONResponse(e.body(), status_code=e.status)
        loop = asyncio.get_running_loop()
        updated = asyncio.Event()
        scheduled = [False]     # a wake-up is on its way: the reader will see newer text too

        def deliver() -> None:
            scheduled[0] = False
            updated.set()

        def wake() -> None:     # called from the decode thread
            if scheduled[0] or (not req.stream and job.finish_reason is None):
                return          # (a plain request only needs to hear about the end)
            scheduled[0] = True
            try:
                loop.call_soon_threadsafe(deliver)
            except RuntimeError:    # the event loop is closed: nobody is listening
                pass

        job = Job(req.prompt, req.max_tokens, req.temperature, req.top_p, req.seed, req.stop,
                  on_update=wake)
        try:
            batcher.submit(job)
        except (ServerBusy, ServerClosing) as e:
            return _error(503, f"server unavailable: {e}", "server_error", None,
                          "overloaded" if isinstance(e, ServerBusy) else "shutting_down")
        except ValueError as e:   # a prompt byte outside the model's vocabulary
            return JSONResponse(RequestError(str(e), "prompt").body(), status_code=400)
        cid, stamp = protocol.new_id(), protocol.now()
        if req.stream:
            return _JobStream(job, _events(job, updated, req, cid, stamp, model_name))
        return await _whole(request, job, updated, req, cid, stamp, model_name)

    return app


async def _events(job: Job, updated: asyncio.Event, req: protocol.CompletionRequest, cid: str,
                  stamp: int, model_name: str) -> AsyncIterator[str]:
    """The server-sent events of a streamed completion."""
    if req.echo and req.prompt_text:
        yield _sse(protocol.chunk(cid, stamp, model_name, req.prompt_text))
    while True:
        await updated.wait()
        updated.clear()
        text, reason = job.take()
        if reason is None:
            if text:
                yield _sse(protocol.chunk(cid, stamp, model_name, text))
            continue
        if reason == "error":
            yield _sse(error_body(job.error or "decoding failed", "server_error"))
        elif reason != "cancelled":
            yield _sse(protocol.chunk(cid, stamp, model_name, text, reason))
            if req.include_usage:
                yield _sse({"id": cid, "object": "text_completion", "created": stamp,
                            "model": model_name, "choices": [],
                            "usage": protocol.usage(len(req.prompt), len(job.generated))})
        yield "data: [DONE]\n\n"
        return


async def _whole(request: Request, job: Job, updated: asyncio.Event,
                 req: protocol.CompletionRequest, cid: str, stamp: int,
                 model_name: str) -> Response:
    """Wait for a plain (not streamed) completion; cancel it if the client goes away."""
    async def finished() -> None:
        while job.finish_reason is None:
            await updated.wait()
            updated.clear()

    waiter = asyncio.ensure_future(finished())
    watcher = asyncio.ensure_future(_client_gone(request))
    try:
        await asyncio.wait({waiter, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not waiter.done():
            waiter.cancel()
            job.cancel()
    if job.finish_reason is None:
        return Response(status_code=499)     # the client is gone: nobody reads this
    text, reason = job.take()
    if reason == "abort":
        return _error(503, "the server shut down before this completion finished; retry",
                      "server_error", None, "shutting_down")
    if reason == "error":
        return _error(500, job.error or "decoding failed", "server_error")
    if req.echo:
        text = req.prompt_text + text
    return JSONResponse(protocol.completion(cid, stamp, model_name, text, reason,
                                            len(req.prompt), len(job.generated)))


__all__ = ["create_app", "page_html"]
