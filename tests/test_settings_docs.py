"""Every setting of the service is documented in the README and listed in .env.example."""

from __future__ import annotations

import importlib
import pathlib
import pkgutil

import pytest
from pydantic_settings import BaseSettings

import bot
from bot.settings import Settings
from bot.settings_base import SettingsPiece

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


def test_settings_is_composed_of_every_piece_each_field_in_one() -> None:
    # A piece left out of Settings would be read by nobody at start-up; a field declared in two pieces would
    # silently take one of the two defaults and descriptions.
    for module in pkgutil.walk_packages(bot.__path__, "bot."):
        importlib.import_module(module.name)
    pieces = set(_subclasses(SettingsPiece))
    assert pieces - set(Settings.__mro__) == set()
    owners: dict[str, list[str]] = {}
    for cls in Settings.__mro__:
        if issubclass(cls, BaseSettings) and cls is not BaseSettings:
            for name in cls.__annotations__:
                if name in Settings.model_fields:
                    owners.setdefault(name, []).append(cls.__qualname__)
    assert {name: where for name, where in owners.items() if len(where) > 1} == {}
    assert set(owners) == set(Settings.model_fields)


def _subclasses(cls: type) -> list[type]:
    return [sub for direct in cls.__subclasses__() for sub in (direct, *_subclasses(direct))]
