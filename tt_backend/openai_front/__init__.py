"""The OpenAI-compatible front: a process of its own that speaks OpenAI's HTTP API to clients
(`/v1/chat/completions`, `/v1/completions`, `/v1/models`, `/health`) and Triton's gRPC streaming to
`tt_llm`, one stream per request. It imports no engine: only the tokenizer helpers (`text`, for the
chat template) and SamplingParams (to refuse bad fields before Triton sees them)."""
