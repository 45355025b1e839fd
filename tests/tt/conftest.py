"""The Tenstorrent tier (make test-tt): ttnn 0.81.1 on mock Wormhole devices. Collected only where
ttnn is installed (the Python 3.12 venv scripts/setup_tt.sh builds), so `make test` is unchanged.
Every scenario runs in its own subprocess (tests/tt/mock_device.py): on a mock device a trace with
ops, execute_trace and wait_for_event segfault, and a crash must fail one test, not the runner."""

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("ttnn") is not None else ["*"]
