"""Per-run limits: one value object, so a caller (the Slack app) can pass a workspace's own."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """The hard caps of one run. Each is checked before every LLM call and after every step."""

    max_steps: int = 15
    """LLM calls allowed in the run; the call that would be number ``max_steps + 1`` is not made."""

    max_tokens: int = 50_000
    """Prompt + completion tokens for the whole run; a call whose worst case would cross it is not made."""

    max_cost_micros: int = 500_000
    """Cost cap for the run in micro-dollars ($0.50); checked against each call's worst-case cost first."""

    max_seconds: float = 300.0
    """Wall-clock cap for the run; raced against in-flight calls, so it also interrupts a slow one."""

    no_progress_steps: int = 3
    """Consecutive steps that bring nothing new (errors, empty or repeated results) before ``no_progress``."""

    max_completion_tokens: int = 1_024
    """Upper bound on each call's completion (``max_tokens`` sent to the model); lowered near the caps."""

    min_completion_tokens: int = 64
    """Below this many affordable completion tokens a call is pointless: the run stops instead."""

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_tokens", "max_cost_micros", "no_progress_steps", "max_completion_tokens"):
            if getattr(self, name) <= 0:
                raise ValueError(f"Limits.{name} must be positive, got {getattr(self, name)!r}")
        if self.max_seconds <= 0:
            raise ValueError(f"Limits.max_seconds must be positive, got {self.max_seconds!r}")
