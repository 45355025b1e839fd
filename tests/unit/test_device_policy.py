"""Device policy is asked of the device object: each torch device's values and the class
`for_device` picks (no GPU is needed to ask a CUDA device its policy), what `trace_mode=auto` and
the sampling heads become with them; and a model's ops, picked once when the loader switches a
`NativeKernelModel` to the native kernels."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tt_backend.contract.forward_batch import ForwardBatch
from tt_backend.contract.modes import StepMode, StepVariant, TraceMode
from tt_backend.devices.cpu.compute_plan import ComputePlan
from tt_backend.devices.cpu.kernels import CpuKernels
from tt_backend.devices.torch.device import CpuTorchDevice, CudaTorchDevice, TorchDevice
from tt_backend.devices.tt.mesh import TTMesh
from tt_backend.models.llama import MLP, Attention, LlamaForCausalLM, RMSNorm
from tt_backend.models.llama_ops import NativeOps, TorchOps
from tt_backend.models.loader import select_kernels
from tt_backend.runtime.config import TraceConfig
from tt_backend.runtime.executor import model_steps
from tt_backend.runtime.inputs import to_device

CPU = TorchDevice.for_device(torch.device("cpu"))
CUDA = TorchDevice.for_device(torch.device("cuda"))
TINY = {"architectures": ["LlamaForCausalLM"], "vocab_size": 32, "hidden_size": 16, "intermediate_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "max_position_embeddings": 64}


def test_for_device_picks_the_class_of_the_kind_once() -> None:
    assert (type(CPU), type(CUDA)) == (CpuTorchDevice, CudaTorchDevice)
    with pytest.raises(ValueError, match="device='meta': the torch devices are cpu and cuda"):
        TorchDevice.for_device(torch.device("meta"))


def test_each_torch_device_states_its_policy() -> None:
    policy = [(d.default_trace_mode, d.dense_prefill_shapes, d.step_may_branch_on_host,
               d.captures_largest_first) for d in (CPU, CUDA)]
    assert policy == [(TraceMode.ALL, True, True, False), (TraceMode.DECODE_ONLY, False, False, True)]


def test_auto_trace_mode_is_the_devices_default_and_a_set_mode_wins() -> None:
    assert [TraceConfig.resolve("auto", d.default_trace_mode).mode
            for d in (CPU, CUDA, TTMesh)] == [TraceMode.ALL, TraceMode.DECODE_ONLY, TraceMode.DECODE_ONLY]
    assert TraceConfig.resolve("none", CPU.default_trace_mode).mode is TraceMode.NONE
    assert TraceConfig.resolve("all", CUDA.default_trace_mode).mode is TraceMode.ALL


def test_sampling_heads_branch_on_the_host_only_where_the_device_lets_a_step() -> None:
    """The filtered head sorts only when a row needs it (a host decision): on the CPU it runs as it
    is after the captured model; on CUDA it is tensor ops only, captured with it."""
    for device, traceable in ((CPU, False), (CUDA, True)):
        steps = model_steps(nn.Identity(), device)
        assert steps[StepMode.DECODE, StepVariant.SAMPLE_FILTERED].head_traceable is traceable
        assert steps[StepMode.DECODE, StepVariant.SAMPLE].head_traceable


def test_a_cpu_step_reads_the_host_tensors_without_a_copy() -> None:
    batch = ForwardBatch(*(torch.zeros(2, 3, dtype=torch.long) for _ in range(6)), decode=True)
    on_device = to_device(batch, CPU.device)
    assert all(a is b for a, b in zip(on_device.tensors, batch.tensors, strict=True)) and on_device.decode


def _tiny_llama() -> LlamaForCausalLM:
    with torch.device("meta"):
        return LlamaForCausalLM.from_hf_config(TINY)


def _ops(model: LlamaForCausalLM) -> list[TorchOps]:
    """The ops of every module that computes with them, the model first."""
    return [m.ops for m in model.modules() if isinstance(m, LlamaForCausalLM | Attention | MLP | RMSNorm)]


def test_native_kernels_switch_every_block_of_a_native_kernel_model_once() -> None:
    model, kernels = _tiny_llama(), CpuKernels("portable")
    assert {type(ops) for ops in _ops(model)} == {TorchOps}
    plan = ComputePlan(torch.device("cpu"), torch.float32, torch.float32, "torch", "portable", kernels, True)
    assert select_kernels(model, plan)
    switched = _ops(model)
    assert len(switched) == 1 + 2 * (1 + 1 + 2) + 1  # the model; per layer attention, MLP, 2 norms; last norm
    assert switched[0] == NativeOps(kernels) and all(ops is switched[0] for ops in switched)  # one choice


def test_a_model_without_native_kernels_keeps_torch_and_refuses_cpu_kernels_native() -> None:
    without = ComputePlan(torch.device("cpu"), torch.float32, torch.float32, "torch", "portable")
    assert not select_kernels(_tiny_llama(), without)
    required = ComputePlan(torch.device("cpu"), torch.float32, torch.float32, "torch", "portable",
                           CpuKernels("portable"), True)
    with pytest.raises(ValueError, match="cpu_kernels=native: the native kernels serve Llama-family models "
                                         "on the CPU, not Linear"):
        select_kernels(nn.Linear(2, 2), required)
