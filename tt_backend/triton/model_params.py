"""Helpers shared by the Triton models: config.pbtxt parameters and logging."""

from __future__ import annotations

import logging
import sys
from typing import Any


def model_parameters(model_config: dict[str, Any]) -> dict[str, str]:
    """`parameters { key: "k" value: { string_value: "v" } }` as {k: v}."""
    return {key: value.get("string_value", "")
            for key, value in model_config.get("parameters", {}).items()}


def setup_logging() -> None:
    """Send our log lines to stdout, where tritonserver's own log goes."""
    root = logging.getLogger("tt_backend")
    if not root.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
