"""Through tritonserver with the default options capped at `cpu_isa=avx2`: what an AVX2-only CPU
(AMD Zen 2/3, most cloud machines before 2023) serves with `make serve`. The answer is right, the
tokens are the in-process engine's at the same level, and the startup log shows that every op took
an AVX2 (or lower) implementation, torch's own kernels capped too."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.conftest import CHAT_PROMPTS
from tests.integration.clients import grpc_stream, http_generate_stream
from tests.integration.conftest import Server, start_server, stop_server, wait_ready
from tests.unit.test_engine import run
from tt_backend.config import EngineConfig
from tt_backend.devices.cpu.isa import probe
from tt_backend.sampling.params import SamplingParams

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif("avx2" not in probe().levels, reason="this CPU has no AVX2")]
MAX_TOKENS = 32


@pytest.fixture(scope="module")
def avx2_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    proc, srv = start_server(tmp_path_factory.mktemp("avx2") / "server.log", "cpu_isa=avx2")
    try:
        wait_ready(proc, srv)
        yield srv
    finally:
        stop_server(proc)


def test_the_default_options_at_avx2_answer_as_the_engine_does(avx2_server: Server, chat_ids: Any,
                                                               chat_text: Any) -> None:
    events = http_generate_stream(avx2_server.http, "ensemble", {"text_input": chat_text(CHAT_PROMPTS[0]),
                                                                 "max_tokens": MAX_TOKENS, "stream": True})
    assert "".join(e["text_output"] for e in events) == "The capital of France is Paris."
    prompts = [chat_ids(p) for p in CHAT_PROMPTS]
    served = []
    for ids in prompts:  # one at a time, as the engine below batches them alone
        inputs = {"input_ids": np.array(ids, dtype=np.int32), "stream": np.array([True]),
                  "max_tokens": np.array([MAX_TOKENS], dtype=np.int32)}
        result = grpc_stream(avx2_server.grpc, "tt_llm", inputs)
        assert result.error is None
        served.append(result.ids())
    engine = EngineConfig(cpu_isa="avx2", max_model_len=256)
    expected = [[t for o in outs for t in o.new_token_ids]
                for outs in (run(engine, [ids], SamplingParams(temperature=0, max_tokens=MAX_TOKENS))[0]
                             for ids in prompts)]
    assert served == expected


def test_the_startup_log_shows_only_avx2_implementations(avx2_server: Server) -> None:
    log = avx2_server.log_text()
    # weight_dtype=auto at avx2: the default GGUF's blocks kept (fp32 activations)
    start = log.index("compute: cpu_isa=avx2, float32 (linear weights: the GGUF's quantized blocks)")
    plan = log[start:].splitlines()[:8]
    ops = dict(line.strip().split(": ", 1) for line in plan[1:])
    assert ops == {
        "linear layers and LM head": "tt_backend_avx2::quant_linear on the GGUF's quantized blocks "
                                     "(listed per layer at load); others: tt_backend_avx2::wide_linear: "
                                     "bf16 weights streamed up to 64 rows, widened for the fp32 GEMM beyond",
        "decode attention": "native tt_backend_avx2::paged_decode_attention",
        "prefill attention": "torch gather + SDPA",
        "rms_norm / add_rms_norm": "native tt_backend_avx2::rms_norm",
        "silu_and_mul": "native tt_backend_avx2::silu_and_mul",
        "rope_and_cache": "native tt_backend_avx2::rope_and_cache",
        "torch's own kernels": "ATen AVX2, oneDNN AVX2, MKL AVX2",
    }
