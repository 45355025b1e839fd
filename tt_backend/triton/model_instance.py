"""Which of the model's Triton instances this stub process is.

The Python backend starts one stub process per instance. Triton names each instance
`<group name>_<index in the group>` (a group's name defaults to `<model>_<group index>`, so the
second instance of `tt_llm`'s first group is `tt_llm_0_1`) and passes the normalized config, with
every group's name and count, as `args["model_config"]`. The instance's place among all of them:

    instance_group [ { count: 2 }, { count: 2 } ]   groups tt_llm_0, tt_llm_1
    tt_llm_0_0 → 0 of 4   tt_llm_0_1 → 1 of 4   tt_llm_1_0 → 2 of 4   tt_llm_1_1 → 3 of 4
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class InstancePosition:
    index: int
    """0-based over every instance of every group, in the config's group order."""
    count: int
    """All instances of the model (the sum of the groups' counts)."""


def instance_position(instance_name: str, model_config: dict[str, Any]) -> InstancePosition:
    """This instance's place among the model's instances; a ValueError naming the instance when its
    name matches no group of the config."""
    groups = model_config.get("instance_group") or []
    total = sum(int(group.get("count", 1)) for group in groups)
    offset = 0
    for group in groups:
        count = int(group.get("count", 1))
        match = re.fullmatch(re.escape(str(group.get("name", ""))) + r"_(\d+)", instance_name)
        if match is not None and int(match[1]) < count:
            return InstancePosition(offset + int(match[1]), total)
        offset += count
    if not groups:  # no instance_group given: Triton runs one instance
        return InstancePosition(0, 1)
    names = ", ".join(f"{g.get('name')} (count {g.get('count', 1)})" for g in groups)
    raise ValueError(f"model instance {instance_name!r} matches none of the instance groups in the model's "
                     f"config: {names}")
