"""Model errors, and what an error answer of a model server means.

    ModelError                     root; ``transient`` says whether a retry may help
    ├── ModelUnreachable           connection refused/reset, DNS, timeout   (transient)
    ├── ModelOverloaded            429, 5xx, a 400 the provider marks transient (transient)
    ├── ContextLengthExceeded      the request is longer than the model's window
    ├── ModelRejected              any other 4xx: auth, unknown model, bad request
    └── ModelStreamBroken          the stream failed after output had been sent

``status_error`` classifies an HTTP error answer (with the wait its
``Retry-After`` asks for, ``retry_after_s``); ``transport`` turns connection
failures into ``ModelUnreachable``.
"""

from __future__ import annotations

import contextlib
import datetime
import email.utils
import math
import re

__all__ = [
    "ContextLengthExceeded",
    "ModelError",
    "ModelOverloaded",
    "ModelRejected",
    "ModelStreamBroken",
    "ModelUnreachable",
    "retry_after_s",
    "status_error",
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

    def __init__(
        self,
        message: str,
        *,
        model: str | None = None,
        status: int | None = None,
        retry_after: float | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.model = model
        self.status = status
        #: Seconds the server asked to wait before trying again (``Retry-After``), if it did.
        self.retry_after = retry_after


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


def status_error(
    model: str, status: int, text: str, *, retry_after: float | None = None
) -> ModelError:
    """What an answer with HTTP ``status`` (400 or more) saying ``text`` means;
    ``retry_after``: the seconds its ``Retry-After`` asked for (``retry_after_s``)."""
    if status == 429 or status >= 500:
        return ModelOverloaded(
            f"{model}: {status} {text}", model=model, status=status, retry_after=retry_after
        )
    if CONTEXT_LENGTH.search(text):
        return ContextLengthExceeded(f"{model}: {text}", model=model, status=status)
    if status in (400, 408, 409) and TRANSIENT_400.search(text):
        return ModelOverloaded(
            f"{model}: {status} {text}", model=model, status=status, retry_after=retry_after
        )
    return ModelRejected(f"{model}: {status} {text}", model=model, status=status)


def retry_after_s(milliseconds: str | None, value: str | None, *, now: float) -> float | None:
    """The wait an error answer asks for, in seconds (never negative), or None.

    ``milliseconds``: the ``retry-after-ms`` header (OpenAI's and Azure's, read first,
    as the openai SDK does); ``value``: ``Retry-After``, seconds or an HTTP date
    (RFC 9110 §10.2.3), which is compared with ``now`` (unix seconds)."""
    if milliseconds is not None:
        with contextlib.suppress(ValueError):
            waited = float(milliseconds) / 1000
            if math.isfinite(waited):
                return max(waited, 0.0)
    if value is None:
        return None
    with contextlib.suppress(ValueError):
        waited = float(value)
        return max(waited, 0.0) if math.isfinite(waited) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000": a date in UTC
        when = when.replace(tzinfo=datetime.UTC)
    return max(when.timestamp() - now, 0.0)
