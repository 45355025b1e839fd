"""Which chips one process may open: UMD's TT_VISIBLE_DEVICES, split among the processes that share
a machine (one Triton model instance each).

UMD reads TT_VISIBLE_DEVICES once, when ttnn first builds its cluster (tt-umd docs/TT_VISIBLE_DEVICES.md;
device/cluster_descriptor.cpp `get_target_chip_ids_from_visible_devices`), so it must be set before
anything asks ttnn for a device. Its value is a comma-separated list of integers (the PCIe devices in
sorted order, the numbered entries of /dev/tenstorrent; newer UMDs take UMD logical chip ids, whose
first ones are those same PCIe chips) or PCI BDFs. A PCIe chip brings the chips of its board: on a
T3K `0` opens the N300 card of PCIe chip 0, two chips; a remote chip cannot be opened alone. So a
machine splits among instances by its PCIe devices:

    T3K, 4 PCIe devices (each an N300 card), instance_group count 2:
        instance 0: TT_VISIBLE_DEVICES=0,1  (chips 0,1 and their remotes 4,5)
        instance 1: TT_VISIBLE_DEVICES=2,3  (chips 2,3 and 6,7)

A TT_VISIBLE_DEVICES the user set is the pool: each instance takes its share of the user's list and
never a chip outside it. Plain Python, no ttnn: this runs before ttnn may be touched.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

TT_VISIBLE_DEVICES_ENV = "TT_VISIBLE_DEVICES"
MOCK_CLUSTER_ENV = "TT_METAL_MOCK_CLUSTER_DESC_PATH"
DEV_TENSTORRENT = Path("/dev/tenstorrent")


@dataclass(frozen=True)
class VisibleShare:
    """One instance's chips: the TT_VISIBLE_DEVICES it opens with, and the pool it was cut from."""

    value: str
    """This instance's TT_VISIBLE_DEVICES."""
    pool: tuple[str, ...]
    """Every identifier the instances split (the user's list, or the machine's PCIe devices)."""
    source: Literal["user", "machine"]
    """user: TT_VISIBLE_DEVICES was set for the server; machine: every PCIe device the host has."""


def pcie_devices(dev_dir: Path = DEV_TENSTORRENT, environ: dict[str, str] | None = None) -> tuple[str, ...]:
    """The machine's PCIe devices as TT_VISIBLE_DEVICES integers ("0".."P-1"): the numbered entries
    of /dev/tenstorrent (UMD indexes their sorted list), or on a mock cluster (tt-metal's
    TT_METAL_MOCK_CLUSTER_DESC_PATH) the chips with MMIO of its description."""
    env = os.environ if environ is None else environ
    mock = env.get(MOCK_CLUSTER_ENV, "")
    if mock:
        import yaml  # transformers' dependency; only a mock cluster needs it

        described = yaml.safe_load(Path(mock).read_text(encoding="utf-8")) or {}
        count = len(described.get("chips_with_mmio") or [])
    else:
        count = sum(1 for entry in dev_dir.iterdir() if entry.name.isdigit()) if dev_dir.is_dir() else 0
    return tuple(str(i) for i in range(count))


def parse_visible(value: str) -> tuple[str, ...]:
    """A TT_VISIBLE_DEVICES value as its identifiers (UMD's format: comma-separated, spaces ignored)."""
    return tuple(part.strip() for part in value.split(",") if part.strip())


def instance_share(index: int, count: int, user_value: str | None, machine: tuple[str, ...]) -> VisibleShare:
    """Instance `index` of `count`: the `index`-th of `count` equal, contiguous shares of the user's
    TT_VISIBLE_DEVICES when set, else of the machine's PCIe devices. A ValueError when the pool is
    empty or does not split evenly."""
    assert 0 <= index < count, (index, count)
    source: Literal["user", "machine"] = "user" if user_value is not None else "machine"
    pool = parse_visible(user_value) if user_value is not None else machine
    where = (f"TT_VISIBLE_DEVICES={user_value!r} (set for the server)" if user_value is not None
             else f"the {len(pool)} PCIe device(s) of this machine")
    if not pool:
        raise ValueError(f"instance_group count {count} on device=tt: {where} leave no Tenstorrent chip "
                         "to split among the instances")
    if len(pool) % count:
        divisors = [d for d in range(1, len(pool) + 1) if len(pool) % d == 0]
        raise ValueError(
            f"instance_group count {count} cannot split {where} ({','.join(pool)}) evenly: each instance "
            f"opens whole PCIe devices (a remote chip comes with its PCIe chip); set the count in "
            f"config.pbtxt to one of {', '.join(map(str, divisors))}")
    per = len(pool) // count
    return VisibleShare(",".join(pool[index * per:(index + 1) * per]), pool, source)
