"""Deterministic release of owned resources: a log of what was released, in order, and failed
releases kept as retryable orphans (so a retry never releases twice what already went)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)


@dataclass
class ResourceOrphan:
    name: str
    release: Callable[[], None]
    error: BaseException


@dataclass
class CleanupLog:
    """What cleanup did, in order; tests read `events`, operators read the log lines."""

    events: list[str] = field(default_factory=list)
    orphans: list[ResourceOrphan] = field(default_factory=list)

    def release(self, name: str, release: Callable[[], None]) -> bool:
        """Run one release; on failure keep it as an orphan. Return whether it succeeded."""
        try:
            release()
        except Exception as exc:  # keep going: later resources must still be released
            logger.warning("releasing %s failed, kept for a retry: %r", name, exc)
            self.orphans.append(ResourceOrphan(name, release, exc))
            self.events.append(f"{name}:failed")
            return False
        self.events.append(name)
        return True

    def retry_orphans(self) -> None:
        pending, self.orphans = self.orphans, []
        for orphan in pending:
            self.release(orphan.name, orphan.release)


class CleanupError(RuntimeError):
    """Cleanup left resources behind; `orphans` can be retried by closing again."""

    def __init__(self, orphans: list[ResourceOrphan]) -> None:
        super().__init__("cleanup failed for " + ", ".join(f"{o.name} ({o.error!r})" for o in orphans))
        self.orphans = orphans
