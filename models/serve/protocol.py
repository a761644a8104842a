"""The OpenAI completions protocol: request validation and response shapes, without a web
framework (so it is tested on its own and the messages are ours, not a schema library's).

`parse_completion` turns a decoded JSON body into a `CompletionRequest`, or raises
`RequestError` naming the field, its value and what is accepted; the server answers that with
status 400 and OpenAI's error shape ``{"error": {"message", "type", "param", "code"}}``.

Accepted (OpenAI's legacy ``/v1/completions``): ``prompt`` (a string, a list holding one
string, a list of byte values 0-255, or a list holding one such list: tokens are bytes),
``max_tokens`` (default 16), ``temperature`` (default 1.0, >= 0; 0 is greedy), ``top_p``
(default 1.0, in (0, 1]), ``seed`` (an int >= 0; absent: a fresh random seed), ``stream``,
``stream_options.include_usage``, ``stop`` (a string or up to 4), ``echo``, ``model`` (any
string: the server has one model and names it in the answer), ``user``. ``n`` and
``best_of`` may only be 1, ``logprobs`` and ``suffix`` only null, the penalties only 0 and
``logit_bias`` only empty: anything else is refused by name rather than silently ignored.
Fields OpenAI does not define are ignored, as many OpenAI-compatible servers do.

>>> req = parse_completion({"prompt": "def ", "max_tokens": 8}, Limits())
>>> req.prompt, req.max_tokens, req.temperature, req.stream
(b'def ', 8, 1.0, False)
>>> parse_completion({"prompt": "x", "max_tokens": -1}, Limits())
Traceback (most recent call last):
    ...
models.serve.protocol.RequestError: max_tokens must be an integer from 0 to 1024; got -1
"""
from __future__ import annotations

import dataclasses
import math
import time
import uuid
from typing import Any, Optional

DEFAULT_MAX_TOKENS = 16     # OpenAI's default for /v1/completions
MAX_STOP_SEQUENCES = 4      # OpenAI's limit


class RequestError(ValueError):
    """A request the server refuses: `param` names the field; `status` is the HTTP status."""

    def __init__(self, message: str, param: Optional[str] = None, code: str = "invalid_value",
                 status: int = 400, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.message, self.param, self.code, self.status, self.kind = \
            message, param, code, status, kind

    def body(self) -> dict:
        """The OpenAI error object."""
        return error_body(self.message, self.kind, self.param, self.code)


def error_body(message: str, kind: str = "invalid_request_error", param: Optional[str] = None,
               code: Optional[str] = None) -> dict:
    """``{"error": {"message", "type", "param", "code"}}``, OpenAI's error shape.

    >>> error_body("no", param="prompt")["error"]["param"]
    'prompt'
    """
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


@dataclasses.dataclass(frozen=True)
class Limits:
    """The server's caps: ``max_tokens`` per request and prompt length in bytes."""
    max_tokens_cap: int = 1024
    max_prompt_bytes: int = 8192

    @property
    def max_body_bytes(self) -> int:
        """The largest request body read: room for the longest prompt written as JSON escapes
        (up to 12 bytes per 3-byte character) or as a list of byte values, plus the rest."""
        return 16 * self.max_prompt_bytes + 65536


@dataclasses.dataclass
class CompletionRequest:
    """A validated completion request. `prompt` is the bytes the model is fed (an empty
    prompt becomes ``b"\\n"``, as in ``hecate sample``); `prompt_text` is what ``echo`` shows."""
    prompt: bytes
    prompt_text: str
    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float = 1.0
    top_p: float = 1.0
    seed: Optional[int] = None
    stream: bool = False
    include_usage: bool = False
    stop: tuple = ()
    echo: bool = False


def _kind(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "an array", dict: "an object", type(None): "null"}.get(type(value),
                                                                       type(value).__name__)


def _type_error(name: str, expected: str, value: Any) -> RequestError:
    return RequestError(f"{name} must be {expected}; got {_kind(value)} ({_show(value)})",
                        name, "invalid_type")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _integer(body: dict, name: str, default: Optional[int], low: int,
             high: Optional[int] = None) -> Optional[int]:
    value = body.get(name)
    if value is None:
        return default
    words = f"an integer from {low} to {high}" if high is not None else f"an integer >= {low}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise _type_error(name, words, value)
    if value < low or (high is not None and value > high):
        raise RequestError(f"{name} must be {words}; got {value}", name)
    return value


def _number(body: dict, name: str, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _type_error(name, "a number", value)
    if isinstance(value, int) and abs(value) > 2 ** 1000:   # math.isfinite would overflow
        raise RequestError(f"{name} must be a finite number; got an integer of "
                           f"{value.bit_length()} bits", name)
    if not math.isfinite(value):
        raise RequestError(f"{name} must be a finite number; got {value}", name)
    return float(value)


def _boolean(body: dict, name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _type_error(name, "true or false", value)
    return value


def _byte_list(value: list) -> Optional[bytes]:
    if value and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        if not all(0 <= t < 256 for t in value):
            raise RequestError("prompt tokens are bytes: each must be an integer from 0 to 255",
                               "prompt")
        return bytes(value)
    return None


def _prompt(body: dict, limits: Limits) -> tuple:
    if "prompt" not in body or body["prompt"] is None:
        raise RequestError("prompt is required (a string)", "prompt", "missing_required_parameter")
    value = body["prompt"]
    if isinstance(value, list):
        if len(value) > 1 and all(isinstance(v, (str, list)) for v in value):
            raise RequestError(f"prompt holds {len(value)} prompts; this server completes one "
                               f"prompt per request (send them as separate requests)", "prompt",
                               "unsupported")
        if len(value) == 1 and isinstance(value[0], (str, list)):
            value = value[0]
        if isinstance(value, list):
            value = _byte_list(value)
            if value is None:
                raise RequestError("prompt must be a string, a list holding one string, or a "
                                   "non-empty list of byte values 0-255", "prompt",
                                   "invalid_type")
    if isinstance(value, str):      # (a lone surrogate from a JSON escape stays a byte error)
        value = value.encode("utf-8", errors="surrogatepass")
    elif not isinstance(value, bytes):
        raise _type_error("prompt", "a string", value)
    raw, text = value, value.decode("utf-8", errors="replace")
    if len(raw) > limits.max_prompt_bytes:
        raise RequestError(f"prompt is {len(raw)} bytes of UTF-8; this server takes at most "
                           f"{limits.max_prompt_bytes} (hecate serve --max-prompt-bytes)",
                           "prompt", "prompt_too_long")
    return raw or b"\n", text


def _stop(body: dict) -> tuple:
    value = body.get("stop")
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise _type_error("stop", "a string or a list of strings", value)
    if len(items) > MAX_STOP_SEQUENCES:
        raise RequestError(f"stop takes at most {MAX_STOP_SEQUENCES} sequences; got "
                           f"{len(items)}", "stop")
    if any(s == "" for s in items):
        raise RequestError("stop sequences must not be empty strings", "stop")
    return tuple(s.encode("utf-8", errors="surrogatepass") for s in items)


def _unsupported(body: dict) -> None:
    """Fields whose only accepted values are the defaults (the feature is not implemented)."""
    rules = {"n": (1,), "best_of": (1,), "logprobs": (), "suffix": (),
             "presence_penalty": (0,), "frequency_penalty": (0,)}
    for name, allowed in rules.items():
        value = body.get(name)
        if value is None or (not isinstance(value, bool) and value in allowed):
            continue
        said = f"only {allowed[0]}" if allowed else "only null"
        raise RequestError(f"{name}={_show(value)} is not supported by this server ({said})",
                           name, "unsupported")
    if body.get("logit_bias") not in (None, {}):
        raise RequestError("logit_bias is not supported by this server (only {} or null)",
                           "logit_bias", "unsupported")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise _type_error("model", "a string", model)


def parse_completion(body: Any, limits: Limits) -> CompletionRequest:
    """Validate a decoded JSON request body (see the module docstring)."""
    if not isinstance(body, dict):
        raise RequestError(f"the request body must be a JSON object; got {_kind(body)}", None,
                           "invalid_type")
    raw, text = _prompt(body, limits)
    _unsupported(body)
    temperature = _number(body, "temperature", 1.0)
    if temperature < 0:
        raise RequestError(f"temperature must be >= 0 (0: greedy); got {temperature:g}",
                           "temperature")
    top_p = _number(body, "top_p", 1.0)
    if not 0 < top_p <= 1:
        raise RequestError(f"top_p must be in (0, 1]; got {top_p:g}", "top_p")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise _type_error("stream_options", "an object", options)
    include_usage = _boolean(options or {}, "include_usage")
    return CompletionRequest(
        prompt=raw, prompt_text=text,
        max_tokens=_integer(body, "max_tokens", DEFAULT_MAX_TOKENS, 0, limits.max_tokens_cap),
        temperature=temperature, top_p=top_p, seed=_integer(body, "seed", None, 0),
        stream=_boolean(body, "stream"), include_usage=include_usage, stop=_stop(body),
        echo=_boolean(body, "echo"))


def new_id() -> str:
    """A completion id, ``cmpl-`` and 24 hex digits."""
    return "cmpl-" + uuid.uuid4().hex[:24]


def choice(text: str, finish_reason: Optional[str]) -> dict:
    """One entry of ``choices`` (index 0: one prompt per request)."""
    return {"text": text, "index": 0, "logprobs": None, "finish_reason": finish_reason}


def completion(cid: str, created: int, model: str, text: str, finish_reason: str,
               prompt_tokens: int, completion_tokens: int) -> dict:
    """A whole ``text_completion`` response.

    >>> r = completion("cmpl-1", 0, "m", "hi", "length", 3, 2)
    >>> r["choices"][0]["text"], r["usage"]["total_tokens"]
    ('hi', 5)
    """
    return {"id": cid, "object": "text_completion", "created": created, "model": model,
            "choices": [choice(text, finish_reason)],
            "usage": usage(prompt_tokens, completion_tokens)}


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def chunk(cid: str, created: int, model: str, text: str,
          finish_reason: Optional[str] = None) -> dict:
    """One streamed chunk (OpenAI's completion-chunk shape: the same object as a whole
    response, without ``usage``)."""
    return {"id": cid, "object": "text_completion", "created": created, "model": model,
            "choices": [choice(text, finish_reason)]}


def now() -> int:
    return int(time.time())


__all__ = ["RequestError", "Limits", "CompletionRequest", "parse_completion", "error_body",
           "completion", "chunk", "usage", "choice", "new_id", "DEFAULT_MAX_TOKENS"]
