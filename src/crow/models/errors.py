"""Model errors, and the one place ``openai`` exceptions are translated.

    ModelError                     root; ``transient`` says whether a retry may help
    ├── ModelUnreachable           connection refused/reset, DNS, timeout   (transient)
    ├── ModelOverloaded            429, 5xx, a 400 the provider marks transient (transient)
    ├── ContextLengthExceeded      the request is longer than the model's window
    ├── ModelRejected              any other 4xx: auth, unknown model, bad request
    └── ModelStreamBroken          the stream failed after output had been sent

No code above ``translate_errors`` catches an ``openai`` exception.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

from ..redact import redact, redact_url

__all__ = [
    "ContextLengthExceeded",
    "ModelError",
    "ModelOverloaded",
    "ModelRejected",
    "ModelStreamBroken",
    "ModelUnreachable",
    "translate_errors",
]

# Texts of 400 answers that mean "try again" rather than "your request is wrong":
# vLLM and llama.cpp report a slow media download this way.
TRANSIENT_400 = re.compile(
    r"timed out|timeout|temporar|try again|overloaded|unavailable|busy", re.IGNORECASE
)
CONTEXT_LENGTH = re.compile(
    r"context.length|context window|maximum context|too many tokens|prompt is too long"
    r"|exceeds? the (?:model'?s? )?(?:max|context)",
    re.IGNORECASE,
)


class ModelError(Exception):
    transient = False

    def __init__(self, message: str, *, model: str | None = None, status: int | None = None):
        super().__init__(message)
        self.message = message
        self.model = model
        self.status = status


class ModelUnreachable(ModelError):
    transient = True


class ModelOverloaded(ModelError):
    transient = True


class ContextLengthExceeded(ModelError):
    pass


class ModelRejected(ModelError):
    pass


class ModelStreamBroken(ModelError):
    pass


def _message(exc: Any) -> str:
    """The error's text, credentials masked: it is logged, and sent to the client."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return redact(str(inner["message"]))
        if isinstance(inner, str):
            return redact(inner)
    return redact(str(getattr(exc, "message", None) or exc))


@contextlib.contextmanager
def translate_errors(model: str, base_url: str = "") -> Iterator[None]:
    """Map ``openai`` (and transport) exceptions to ``ModelError``s, most specific first.

    ``base_url`` is named when the server cannot be reached, with what to do."""
    import openai  # deferred: importing openai costs ~0.4 s of start-up

    try:
        yield
    except openai.APITimeoutError as exc:  # a subclass of APIConnectionError: first
        raise ModelUnreachable(f"{model}: the request timed out", model=model) from exc
    except openai.APIConnectionError as exc:
        where = f" at {redact_url(base_url)}" if base_url else ""
        raise ModelUnreachable(
            f"{model}: cannot reach the model server{where} ({_message(exc)}): start it, or "
            "point Crow at another (OPENAI_BASE_URL, or base_url in config.toml)",
            model=model,
        ) from exc
    except openai.APIStatusError as exc:
        status, text = exc.status_code, _message(exc)
        if status == 429 or status >= 500:
            raise ModelOverloaded(f"{model}: {status} {text}", model=model, status=status) from exc
        if CONTEXT_LENGTH.search(text):
            raise ContextLengthExceeded(f"{model}: {text}", model=model, status=status) from exc
        if status in (400, 408, 409) and TRANSIENT_400.search(text):
            raise ModelOverloaded(f"{model}: {status} {text}", model=model, status=status) from exc
        raise ModelRejected(f"{model}: {status} {text}", model=model, status=status) from exc
    except openai.APIError as exc:  # e.g. an error event inside the stream
        raise ModelOverloaded(f"{model}: {_message(exc)}", model=model) from exc
