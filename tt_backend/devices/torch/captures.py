"""What the torch devices hand back: captured steps (`Capture`) and launched work (`Launched`).

- CPU: `ScriptCapture`, a TorchScript graph bound to its persistent inputs, and `ComposedCapture`,
  a two-stage step replayed as its body's graph, then its head; work runs inline (`Ready`) or on
  the device thread (`FromThread`).
- CUDA: `GraphCapture`, a CUDA graph and its output buffer; a launch copies its result to pinned
  host memory behind an event (`CudaRead`).
"""

from __future__ import annotations

from concurrent.futures import Future

import torch

from tt_backend.devices.device import StepFn

Graph = torch.jit.ScriptFunction | torch.jit.ScriptModule


def inlined(graph: Graph) -> Graph:
    """A traced module as one graph: its submodules' methods inlined and its attributes (the weights,
    shared, not copied) made constants, so a replay runs no method frames and attribute lookups (30
    layers of modules a step). Only that (torch.jit.freeze's inlining); none of freezing's
    optimisation passes, which concatenate the weights of linears sharing an input into new copies.
    Traced decode steps of the default GGUF, one process, alternating, 2-core Zen 4: B=1 4.58 and
    4.78 against 5.39-5.52 ms; the logits bit for bit the same."""
    if not isinstance(graph, torch.jit.ScriptModule):
        return graph
    frozen = torch.jit.RecursiveScriptModule(torch._C._freeze_module(graph.eval()._c, []))
    torch.jit.RecursiveScriptModule._finalize_scriptmodule(frozen)
    return frozen


class ScriptCapture:
    """A TorchScript graph of the step bound to persistent inputs of one geometry.

    The traced graph records shapes as `aten::size` ops, so one graph serves every geometry of the
    same function: capturing 60 decode shapes traces once (a trace costs ~1 s). The graph runs
    without the profiling executor's optimisations: with several shapes over one graph they
    changed greedy tokens, and at batch 1 and 32 they made no measurable speed difference."""

    def __init__(self, graph: Graph, inputs: tuple[torch.Tensor, ...]) -> None:
        self._graph: Graph | None = graph
        self._inputs = inputs

    def replay(self) -> torch.Tensor:
        assert self._graph is not None, "replay of a released capture"
        with torch.jit.optimized_execution(False):
            out: torch.Tensor = self._graph(*self._inputs)
        return out

    def release(self) -> None:
        self._graph = None
        self._inputs = ()


class ComposedCapture:
    """A two-stage step replayed as its body's graph, then its head's graph on the body's output."""

    def __init__(self, body: ScriptCapture, head: StepFn, head_inputs: tuple[torch.Tensor, ...]) -> None:
        self._body: ScriptCapture | None = body
        self._head = head
        self._head_inputs = head_inputs

    def replay(self) -> torch.Tensor:
        assert self._body is not None, "replay of a released capture"
        logits = self._body.replay()
        with torch.jit.optimized_execution(False):
            out: torch.Tensor = self._head(logits, *self._head_inputs)
        return out

    def release(self) -> None:
        if self._body is not None:
            self._body.release()
        self._body = None
        self._head_inputs = ()


class GraphCapture:
    def __init__(self, graph: torch.cuda.CUDAGraph, output: torch.Tensor) -> None:
        self._graph: torch.cuda.CUDAGraph | None = graph
        self._output = output

    def replay(self) -> torch.Tensor:
        assert self._graph is not None, "replay of a released capture"
        self._graph.replay()
        return self._output

    def release(self) -> None:
        if self._graph is not None:
            self._graph.reset()
        self._graph = None


class Ready:
    def __init__(self, value: torch.Tensor) -> None:
        self._value = value

    def host(self) -> torch.Tensor:
        return self._value

    def device_value(self) -> torch.Tensor:
        return self._value


class FromThread:
    def __init__(self, future: Future[torch.Tensor]) -> None:
        self._future = future

    def host(self) -> torch.Tensor:
        return self._future.result()

    def device_value(self) -> torch.Tensor:
        return self._future.result()


class CudaRead:
    def __init__(self, value: torch.Tensor, host: torch.Tensor, event: torch.cuda.Event) -> None:
        self._value, self._host, self._event = value, host, event

    def host(self) -> torch.Tensor:
        self._event.synchronize()
        return self._host

    def device_value(self) -> torch.Tensor:
        return self._value
