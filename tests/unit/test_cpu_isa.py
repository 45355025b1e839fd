"""The CPU probe, `cpu_isa` levels and what `ComputePlan` picks at each (pure logic on made-up
CPUs, plus the plans of this machine's own levels)."""

from __future__ import annotations

import pytest
import torch

from tt_backend.devices.cpu.compute_plan import BF16_LEVELS, ComputePlan
from tt_backend.devices.cpu.isa import CpuCapabilities, parse_cpuinfo, probe

ZEN3 = "fpu vme sse sse2 ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt aes xsave avx f16c bmi1 avx2 bmi2"
ICELAKE = ZEN3 + " avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni"
SAPPHIRE = ICELAKE + " avx512_bf16 amx_bf16 amx_tile amx_int8"
GRAVITON3 = "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp sve bf16 i8mm"


def cpu(flags: str, machine: str = "x86_64", amx: bool = False) -> CpuCapabilities:
    return parse_cpuinfo(f"processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: {flags}\n"
                         f"Features\t: {flags}\n", machine, amx_permitted=amx)


def test_levels_follow_the_flags_and_the_os_permission() -> None:
    assert cpu("sse sse2").levels == ("portable",)
    assert cpu(ZEN3).levels == ("portable", "avx2")
    assert cpu(ICELAKE).levels == ("portable", "avx2", "avx512")
    assert cpu(SAPPHIRE, amx=True).levels == ("portable", "avx2", "avx512", "avx512_bf16", "amx")
    assert cpu(SAPPHIRE, amx=False).levels == ("portable", "avx2", "avx512", "avx512_bf16")
    assert cpu(GRAVITON3, "aarch64").levels == ("portable", "neon")
    assert cpu(ZEN3.replace(" fma", "")).levels == ("portable",)  # AVX2 without FMA is not the level
    assert cpu(ZEN3, "riscv64").levels == ("portable",)


def test_auto_is_the_best_level_and_a_level_above_it_names_what_is_missing() -> None:
    assert cpu(ZEN3).resolve("auto") == "avx2"
    assert cpu(ZEN3).resolve("portable") == "portable"
    with pytest.raises(ValueError, match=r"cpu_isa='avx512' is above what this CPU provides \(best: avx2; "
                                         r"missing: avx512f, avx512bw, avx512vl, avx512dq\)"):
        cpu(ZEN3).resolve("avx512")
    with pytest.raises(ValueError, match=r"cpu_isa='amx' .*missing: the OS's permission for AMX tile data"):
        cpu(SAPPHIRE, amx=False).resolve("amx")
    with pytest.raises(ValueError, match="cpu_isa='avx2' is not a level of aarch64 CPUs; levels: auto, "
                                         "portable, neon"):
        cpu(GRAVITON3, "aarch64").resolve("avx2")


def test_this_machine_has_at_least_portable_and_describes_itself() -> None:
    caps = probe()
    assert caps.levels[0] == "portable" and caps.best == caps.levels[-1]
    assert " < ".join(caps.levels) in caps.describe()


CPU = torch.device("cpu")
NEEDS_AVX2 = pytest.mark.skipif("avx2" not in probe().levels, reason="this CPU has no AVX2")


@NEEDS_AVX2
def test_auto_below_avx512_is_fp32_activations_with_bf16_weights_on_wide_linear() -> None:
    plan = ComputePlan.resolve(CPU, "auto", "avx2", caps=cpu(ZEN3))
    assert (plan.activations, plan.weights, plan.linear, plan.level) == \
        (torch.float32, torch.bfloat16, "wide_bf16", "avx2")
    assert plan.kernels is not None and plan.kernels.level == "avx2"
    assert plan.dtype_name == "float32 (linear weights bfloat16)"
    paths = plan.op_paths()
    assert paths["linear layers and LM head"].startswith("tt_backend_avx2::wide_linear")
    assert paths["decode attention"] == "native tt_backend_avx2::paged_decode_attention"
    ours = [path for op, path in paths.items() if op != "torch's own kernels"]
    assert not any(word in path for path in ours for word in ("oneDNN", "avx512", "amx"))


def test_auto_at_avx512_without_bf16_is_fp32_with_bf16_weights_and_bf16_still_prepacks() -> None:
    if "avx512" not in probe().levels:
        pytest.skip("this CPU has no AVX-512")
    auto = ComputePlan.resolve(CPU, "auto", "avx512", caps=cpu(ICELAKE))
    assert (auto.activations, auto.weights, auto.linear) == (torch.float32, torch.bfloat16, "wide_bf16")
    bf16 = ComputePlan.resolve(CPU, "bfloat16", "avx512", caps=cpu(ICELAKE))
    assert (bf16.activations, bf16.linear) == (torch.bfloat16, "onednn_packed")


@NEEDS_AVX2
def test_no_bf16_onednn_prepack_below_avx512_whatever_the_dtype() -> None:
    bf16 = ComputePlan.resolve(CPU, "bfloat16", "avx2", caps=cpu(ZEN3))
    assert (bf16.activations, bf16.weights, bf16.linear) == (torch.bfloat16, torch.bfloat16, "torch")
    no_kernels = ComputePlan.resolve(CPU, "auto", "avx2", "torch", caps=cpu(ZEN3))
    assert (no_kernels.activations, no_kernels.weights, no_kernels.linear, no_kernels.kernels) == \
        (torch.float32, torch.float32, "torch", None)


@pytest.mark.parametrize("level", [lv for lv in probe().levels if lv in BF16_LEVELS])
def test_auto_with_bf16_hardware_is_bf16_on_panels_or_tiles(level: str) -> None:
    """The native kernels' panels (AMX tiles where the OS allows them); oneDNN with cpu_kernels=torch."""
    plan = ComputePlan.resolve(CPU, "auto", level)
    assert (plan.activations, plan.weights) == (torch.bfloat16, torch.bfloat16)
    tiles = plan.kernels is not None and plan.kernels.tile_linear_supported()
    assert plan.linear == ("amx_tiles" if tiles else "bf16_panels")
    assert "panels_linear: bf16 weights in panels" in plan.op_paths()["linear layers and LM head"] or tiles
    assert ComputePlan.resolve(CPU, "auto", level, "torch").linear == "onednn_packed"


def test_off_the_cpu_auto_is_bf16_and_the_native_kernels_are_refused() -> None:
    plan = ComputePlan.resolve(torch.device("cuda"), "auto")
    assert (plan.activations, plan.linear, plan.level, plan.kernels) == (torch.bfloat16, "torch", None, None)
    with pytest.raises(ValueError, match="cpu_kernels=native: the native kernels run on the CPU, not on "
                                         "cuda"):
        ComputePlan.resolve(torch.device("cuda"), "auto", cpu_kernels="native")


def test_a_level_above_this_cpu_fails_with_the_option_named() -> None:
    with pytest.raises(ValueError, match=r"cpu_isa='avx512' is above what this CPU provides"):
        ComputePlan.resolve(CPU, "auto", "avx512", caps=cpu(ZEN3))
