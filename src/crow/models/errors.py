"""Model errors, and what an error answer of a model server means.

    ModelError                     root; ``transient`` says whether a retry may help
    ├── ModelUnreachable           connection refused/reset, DNS, timeout   (transient)
    ├── ModelOverloaded            429, 5xx, a 400 the provider marks transient (transient)
    ├── ContextLengthExceeded      the request is longer than the model's window
    ├── ModelRejected              any other 4xx: auth, unknown model, bad request
    └── ModelStreamBroken          the stream failed after output had been sent

``status_error`` classifies an HTTP error answer; ``transport`` turns
connection failures into ``ModelUnreachable``.
"""

from __future__ import annotations

import re

__all__ = [
    "ContextLengthExceeded",
    "ModelError",
    "ModelOverloaded",
    "ModelRejected",
    "ModelStreamBroken",
    "ModelUnreachable",
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


def status_error(model: str, status: int, text: str) -> ModelError:
    """What an answer with HTTP ``status`` (400 or more) saying ``text`` means."""
    if status == 429 or status >= 500:
        return ModelOverloaded(f"{model}: {status} {text}", model=model, status=status)
    if CONTEXT_LENGTH.search(text):
        return ContextLengthExceeded(f"{model}: {text}", model=model, status=status)
    if status in (400, 408, 409) and TRANSIENT_400.search(text):
        return ModelOverloaded(f"{model}: {status} {text}", model=model, status=status)
    return ModelRejected(f"{model}: {status} {text}", model=model, status=status)
