"""EngineConfig: every engine option, its default, and config-time validation (options.py), with the
parsing of option strings and the shared value checks (values.py)."""

from tt_backend.config.options import EngineConfig
from tt_backend.config.values import TT_BLOCK_MULTIPLE, check_tt_block_size

__all__ = ["TT_BLOCK_MULTIPLE", "EngineConfig", "check_tt_block_size"]
