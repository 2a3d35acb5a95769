"""crow.models: the model registry, OpenAI-compatible calls, retry and fallback."""
