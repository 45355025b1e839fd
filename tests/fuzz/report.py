"""The fuzz's result: counts per target and verdict, every violation with the request that caused
it, the bystanders' and the server's problems; grouped for reading (violations of one kind and
one message shape together, the shortest reproducers first)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.fuzz.request import TARGETS, FuzzRequest, cut
from tests.fuzz.verdict import Judgement


def shape(message: str) -> str:
    """A message with numbers and quoted values blanked, cut to 90 characters."""
    blanked = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", re.sub(r"\d+", "#", message))
    return blanked[:90]


@dataclass(frozen=True)
class Violation:
    request: FuzzRequest
    judgement: Judgement
    index: int
    """Its place among the judged requests (the report lists groups by their first violation: what
    went wrong first is often what made the rest go wrong)."""

    @property
    def group(self) -> tuple[str, str, str]:
        """Its target, kind, and its message's shape."""
        return self.request.target, self.judgement.kind, shape(self.judgement.detail)


@dataclass
class FuzzReport:
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(target, verdict) → requests."""
    violations: list[Violation] = field(default_factory=list)
    valid: int = 0
    """Requests sent valid (which must succeed)."""
    repeats: int = 0
    """Requests drawn again after they were sent (not sent twice)."""
    refusals: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(target, error message shape) → client errors of that shape."""
    bystander_runs: int = 0
    bystander_seconds: list[float] = field(default_factory=list)
    """How long each bystander run took (32 tokens)."""
    bystander_problems: list[str] = field(default_factory=list)
    server_problems: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def sent(self) -> int:
        return sum(self.counts.values())

    @property
    def ok(self) -> bool:
        return not (self.violations or self.bystander_problems or self.server_problems)

    def groups(self) -> list[list[Violation]]:
        by: dict[tuple[str, str, str], list[Violation]] = {}
        for v in self.violations:
            by.setdefault(v.group, []).append(v)
        return [sorted(vs, key=lambda v: len(v.request.describe(10**9)))
                for vs in sorted(by.values(), key=lambda vs: vs[0].index)]

    def summary(self) -> str:
        per = ", ".join(f"{t} {sum(n for (tt, _), n in self.counts.items() if tt == t)}" for t in TARGETS)
        verdicts = ", ".join(f"{v} {sum(n for (_, vv), n in self.counts.items() if vv == v)}"
                             for v in ("ok", "refused", "violation"))
        valid = sum(1 for v in self.violations if v.request.valid)
        times = sorted(self.bystander_seconds) or [0.0]
        return (f"{self.sent} distinct requests ({self.valid} valid; {self.repeats} repeats drawn, not "
                f"sent) in {self.wall_s:.0f} s ({per}): {verdicts} "
                f"({valid} of the violations by valid requests); {self.bystander_runs} bystander runs of "
                f"{times[len(times) // 2]:.1f} s (median), {times[-1]:.1f} s (longest)")

    def text(self, examples: int = 2, limit: int = 240) -> str:
        lines = [self.summary()]
        lines += [f"bystanders: {p}" for p in self.bystander_problems[:10]]
        if len(self.bystander_problems) > 10:
            lines.append(f"bystanders: ... {len(self.bystander_problems) - 10} more problems")
        lines += [f"server: {p}" for p in self.server_problems]
        groups = self.groups()
        if groups:
            lines.append(f"{len(self.violations)} violations in {len(groups)} groups, in the order each "
                         "first happened:")
        for vs in groups:
            first = vs[0]
            lines.append(f"[{len(vs)}x] {first.request.target}: {first.judgement.kind}: "
                         f"{cut(first.judgement.detail, limit)}")
            lines += [f"    request: {v.request.describe(limit)}" for v in vs[:examples]]
        return "\n".join(lines)

    def write(self, path: Path) -> None:
        """Every violation, in full (values still cut at 2,000 characters)."""
        with open(path, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(self.text(examples=0) + "\n\nall violations:\n")
            for v in self.violations:
                f.write(f"- {v.judgement.kind}: {cut(v.judgement.detail, 2000)}\n"
                        f"  {v.request.describe(2000)}\n")
            f.write("\nclient errors (the refusals, by message shape):\n")
            for (target, shape), n in sorted(self.refusals.items()):
                f.write(f"{n:5d} {target}: {shape}\n")
