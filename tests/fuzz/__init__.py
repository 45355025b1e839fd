"""Fuzzing against a live tritonserver: hypothesis strategies for `tt_llm` (vllm_backend schema),
`ensemble` (TRT-LLM tensors) and the OpenAI front, and a runner that sends them concurrently beside
greedy bystander streams and checks that no request can harm another. Used by
tests/integration/test_fuzz.py and by the `fuzz` scenario of bench/reliability.py."""
