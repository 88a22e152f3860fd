"""The engine's settings take their defaults from the values they configure, written once there."""

from __future__ import annotations

from agent_core import AgentSettings, Limits


def test_the_run_caps_default_to_limits_own_defaults() -> None:
    defaults = AgentSettings.model_construct()  # the fields' defaults, no environment or .env read
    assert defaults.limits() == Limits()
    assert AgentSettings.model_fields["agent_max_cost_usd"].default == Limits().max_cost_micros / 1_000_000
