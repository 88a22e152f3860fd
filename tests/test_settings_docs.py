"""Every setting of the service is documented in the README and listed in .env.example."""

from __future__ import annotations

import pathlib

import pytest

from bot.settings import Settings

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", sorted(Settings.model_fields))
def test_setting_is_documented(name: str) -> None:
    env = name.upper()
    assert f"`{env}`" in (ROOT / "README.md").read_text(), f"{env} is missing from the README's settings tables"
    assert f"{env}=" in (ROOT / ".env.example").read_text(), f"{env} is missing from .env.example"


def test_env_example_values_are_the_defaults(tmp_path: pathlib.Path) -> None:
    # Uncomment every listed value: loading them must give exactly the built-in defaults.
    lines = []
    for line in (ROOT / ".env.example").read_text().splitlines():
        body = line.removeprefix("# ")
        if "=" in body and not body.endswith("=") and body.split("=", 1)[0].isupper():
            lines.append(body)
    env_file = tmp_path / ".env"
    env_file.write_text("\n".join(lines) + "\n")
    from_file = Settings(_env_file=env_file)  # type: ignore[call-arg]
    defaults = Settings(_env_file=None)  # type: ignore[call-arg]
    assert len(lines) > 30
    assert from_file.model_dump() == defaults.model_dump()
