"""What this CPU can run: one probe of its instruction sets and of what the OS grants, and the
ladder of levels (`cpu_isa`) that the native kernels are built for.

A level names a set of instructions; each kernel library is compiled for exactly one level with
fixed flags (`LEVEL_FLAGS`, never `-march=native`), so a library built on one machine runs on any
machine that has its level, and a capped engine on a big CPU runs the same code as an uncapped
one on a small CPU.

    x86-64:  portable < avx2 < avx512 < avx512_bf16 < amx
    aarch64: portable < neon
"""

from __future__ import annotations

import ctypes
import functools
import logging
import platform
from dataclasses import dataclass, replace
from typing import Literal

logger = logging.getLogger(__name__)

IsaLevel = Literal["portable", "avx2", "avx512", "avx512_bf16", "amx", "neon"]
"""A level of `cpu_isa` (config.CpuIsaName less `auto`)."""
Arch = Literal["x86_64", "aarch64", "other"]

LADDERS: dict[Arch, tuple[IsaLevel, ...]] = {
    "x86_64": ("portable", "avx2", "avx512", "avx512_bf16", "amx"),
    "aarch64": ("portable", "neon"),
    "other": ("portable",),
}

# The /proc/cpuinfo flags each level needs on top of the level below it.
REQUIRED: dict[IsaLevel, tuple[str, ...]] = {
    "portable": (),
    "avx2": ("avx2", "fma", "f16c"),
    "avx512": ("avx512f", "avx512bw", "avx512vl", "avx512dq"),
    "avx512_bf16": ("avx512_bf16", "avx512_vnni"),
    "amx": ("amx_tile", "amx_bf16"),
    "neon": ("asimd",),
}

_X86_BASE = ["-mtune=generic"]
_AVX2 = [*_X86_BASE, "-mavx2", "-mfma", "-mf16c"]
_AVX512 = [*_AVX2, "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mprefer-vector-width=512"]
LEVEL_FLAGS: dict[tuple[Arch, IsaLevel], list[str]] = {
    ("x86_64", "portable"): ["-march=x86-64", *_X86_BASE],
    ("x86_64", "avx2"): ["-march=x86-64", *_AVX2],
    ("x86_64", "avx512"): ["-march=x86-64", *_AVX512],
    ("x86_64", "avx512_bf16"): ["-march=x86-64", *_AVX512, "-mavx512bf16", "-mavx512vnni"],
    ("x86_64", "amx"): ["-march=x86-64", *_AVX512, "-mavx512bf16", "-mavx512vnni", "-mamx-tile",
                        "-mamx-bf16"],
    # NEON is part of the aarch64 baseline: both levels compile the same portable loops, which the
    # compiler vectorises with it (no NEON intrinsics yet).
    ("aarch64", "portable"): ["-march=armv8-a"],
    ("aarch64", "neon"): ["-march=armv8-a"],
    ("other", "portable"): [],
}
"""Compiler flags of each level's kernel library (the code inside is selected by the macros they
define, e.g. `__AVX2__`, `__AVX512BF16__`)."""

# torch's own kernels are capped by environment variables read at process start: ATen's vectorised
# ops, oneDNN and MKL (torch's BLAS on x86-64).
_ATEN: dict[IsaLevel, str] = {"portable": "default", "avx2": "avx2", "avx512": "avx512",
                              "avx512_bf16": "avx512", "amx": "avx512", "neon": "default"}
_ONEDNN: dict[IsaLevel, str] = {"portable": "SSE41", "avx2": "AVX2", "avx512": "AVX512_CORE",
                                "avx512_bf16": "AVX512_CORE_BF16", "amx": "AVX512_CORE_AMX"}
_MKL: dict[IsaLevel, str] = {"portable": "SSE4_2", "avx2": "AVX2", "avx512": "AVX512",
                             "avx512_bf16": "AVX512", "amx": "AVX512"}


def torch_caps_env(level: IsaLevel) -> dict[str, str]:
    """The environment that keeps torch's own kernels within `level` in a process started with it
    (`scripts/serve.sh` sets it for an explicit `cpu_isa`), so a capped server on a big CPU runs what
    an uncapped one runs on a small CPU."""
    env = {"ATEN_CPU_CAPABILITY": _ATEN[level]}
    if level in _ONEDNN:
        env |= {"ONEDNN_MAX_CPU_ISA": _ONEDNN[level], "MKL_ENABLE_INSTRUCTIONS": _MKL[level]}
    return env


@dataclass(frozen=True)
class CpuCapabilities:
    """The probe's result: the architecture, the instruction-set flags the kernel reports, and
    whether the OS lets this process use AMX tile data (Linux asks for it per process)."""

    arch: Arch
    flags: frozenset[str]
    amx_permitted: bool = False
    model_name: str = ""

    @property
    def levels(self) -> tuple[IsaLevel, ...]:
        """The levels this CPU runs, lowest first: each needs every flag of the ones below it."""
        have: list[IsaLevel] = []
        for level in LADDERS[self.arch]:
            if not set(REQUIRED[level]) <= self.flags or (level == "amx" and not self.amx_permitted):
                break
            have.append(level)
        return tuple(have)

    @property
    def best(self) -> IsaLevel:
        return self.levels[-1]

    def resolve(self, cpu_isa: str) -> IsaLevel:
        """The level an engine asked for `cpu_isa` runs at: `auto` is the best this CPU has; a
        named level must be one it has."""
        if cpu_isa == "auto":
            return self.best
        ladder = LADDERS[self.arch]
        if cpu_isa not in ladder:
            raise ValueError(f"cpu_isa={cpu_isa!r} is not a level of {self.arch} CPUs; levels: auto, "
                             f"{', '.join(ladder)}")
        if cpu_isa not in self.levels:
            missing = self.missing(cpu_isa)
            raise ValueError(f"cpu_isa={cpu_isa!r} is above what this CPU provides (best: {self.best}; "
                             f"missing: {', '.join(missing)})")
        return cpu_isa

    def missing(self, level: str) -> list[str]:
        ladder = LADDERS[self.arch]
        needed = [f for lv in ladder[: ladder.index(level) + 1] for f in REQUIRED[lv]]
        gone = [f for f in needed if f not in self.flags]
        if level == "amx" and not gone and not self.amx_permitted:
            gone.append("the OS's permission for AMX tile data (arch_prctl)")
        return gone

    def describe(self) -> str:
        known = {f for fs in REQUIRED.values() for f in fs} | {"sve", "bf16"}
        notable = sorted(self.flags & known)
        return (f"{self.model_name or 'unknown CPU'} ({self.arch}): levels {' < '.join(self.levels)}; "
                f"flags {' '.join(notable) or 'none of note'}")


def parse_cpuinfo(text: str, machine: str, amx_permitted: bool = False) -> CpuCapabilities:
    """Capabilities from /proc/cpuinfo's first processor (`flags` on x86, `Features` on ARM)."""
    arch: Arch = "x86_64" if machine in ("x86_64", "AMD64") else \
        "aarch64" if machine in ("aarch64", "arm64") else "other"
    flags: frozenset[str] = frozenset()
    name = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("flags", "features") and not flags:
            flags = frozenset(value.split())
        elif key == "model name" and not name:
            name = value.strip()
    return CpuCapabilities(arch, flags, amx_permitted and arch == "x86_64", name)


def _request_amx_permission() -> bool:
    """Ask Linux for AMX tile data in this process (arch_prctl ARCH_REQ_XCOMP_PERM); granted once
    per process, and a no-op when already granted."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        sys_arch_prctl, req_xcomp_perm, xfeature_xtiledata = 158, 0x1023, 18
        return int(libc.syscall(sys_arch_prctl, req_xcomp_perm, xfeature_xtiledata)) == 0
    except (OSError, AttributeError):
        return False


@functools.cache
def probe() -> CpuCapabilities:
    """This machine's capabilities (probed once per process)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            text = f.read()
    except OSError:
        text = ""
    caps = parse_cpuinfo(text, platform.machine())
    if caps.arch == "x86_64" and set(REQUIRED["amx"]) <= caps.flags:  # ask only where tiles exist
        caps = replace(caps, amx_permitted=_request_amx_permission())
    logger.info("cpu: %s", caps.describe())
    return caps
