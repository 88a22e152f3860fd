"""The models the operator allows (``AGENT_MODELS``), each with its price: the cost lever a workspace, a channel
or a single run pulls. Pure: no I/O.

``AGENT_MODELS=gpt-4o-mini,gpt-4o`` takes the prices from the engine's price table;
``AGENT_MODELS=gpt-4o-mini:0.15/0.60,my-model:1.00/4.00`` gives them, USD per 1M prompt/completion tokens
(``/cached`` a third figure); a price cut short (``gpt-4o-mini:0.15``) stops start-up, never becomes part of a name
sent to the provider. A name takes the table's price only when it is the table's name or a dated snapshot of it.
The first is the default of every run. Empty: ``OPENAI_MODEL`` alone, priced as
before (``LLM_PRICE_*`` or the table), so a deployment that sets nothing runs as it did. A model without a known
price is refused at start-up: a silent zero cost would disable every cost cap.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

from agent_core import ConfigError, ModelChoice, Price, format_usd, price_for, usd_to_micros
from bot.workspace.defaults import WorkspaceDefaults

#: ``name:prompt/completion[/cached]``, USD per 1M tokens. A name may hold colons itself (``llama3:8b``): only a
#: suffix of figures is a price.
_PRICED_RE = re.compile(r"(?P<name>.+):(?P<prompt>[0-9]+(?:\.[0-9]+)?)/(?P<completion>[0-9]+(?:\.[0-9]+)?)"
                        r"(?:/(?P<cached>[0-9]+(?:\.[0-9]+)?))?", re.ASCII)
#: What follows a name's last colon when it is meant as a price (figures, dots, slashes, a dollar sign), whether
#: or not it is a whole one: ``gpt-4o-mini:0.15`` is a price cut short, never a model named so.
_PRICE_LIKE_RE = re.compile(r":\s*\$?[0-9][0-9.$/\s]*", re.ASCII)
#: What a model name may be (as people type it in ``/agent-limits model`` and ``/model``).
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@-]{0,99}", re.ASCII)
#: ``/model <name> <task>`` at the start of a mention: this run's model.
_RUN_MODEL_RE = re.compile(r"\s*/model\s+(\S+)\s*(.*)", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Models:
    """The allowed models, the default first."""

    choices: tuple[ModelChoice, ...]

    @property
    def default(self) -> ModelChoice:
        return self.choices[0]

    def get(self, name: str) -> ModelChoice | None:
        return next((m for m in self.choices if m.name == name), None)

    def names(self) -> list[str]:
        return [m.name for m in self.choices]

    def listed(self) -> str:
        """``gpt-4o-mini` ($0.15/$0.60 per 1M tokens), ...``: what ``model`` commands name."""
        return ", ".join(f"`{m.name}` ({per_million(m.price)})" for m in self.choices)

    @classmethod
    def from_settings(cls, settings: WorkspaceDefaults) -> Models:
        """``AGENT_MODELS`` read and priced; ConfigError naming it for anything that is not a model with a price."""
        text = settings.agent_models.strip()
        if not text:
            return cls((ModelChoice(settings.openai_model, settings.price()),))
        choices: list[ModelChoice] = []
        for item in (part.strip() for part in text.split(",")):
            choice = _choice(item, settings)
            if any(c.name == choice.name for c in choices):
                raise ConfigError(f"AGENT_MODELS names {choice.name!r} twice")
            choices.append(choice)
        return cls(tuple(choices))


#: What a policy built without settings allows: ``OPENAI_MODEL``'s default, at the table's price.
_DEFAULT_NAME: str = WorkspaceDefaults.model_fields["openai_model"].default
DEFAULT_MODELS = Models((ModelChoice(_DEFAULT_NAME, price_for(_DEFAULT_NAME)),))


def _choice(item: str, settings: WorkspaceDefaults) -> ModelChoice:
    priced = _PRICED_RE.fullmatch(item)
    if priced is None and ":" in item and _PRICE_LIKE_RE.fullmatch(item[item.rfind(":"):]):
        raise ConfigError(f"AGENT_MODELS: {item!r} is not a whole price: write `name:prompt/completion` or "
                          "`name:prompt/completion/cached` (USD per 1M tokens), e.g. `gpt-4o-mini:0.15/0.60`")
    name = priced["name"] if priced else item
    if not NAME_RE.fullmatch(name):
        raise ConfigError(f"AGENT_MODELS: {item!r} is not a model name (or `name:prompt/completion` in USD per 1M)")
    if priced:
        prompt = usd_to_micros(Decimal(priced["prompt"]), setting="AGENT_MODELS")
        cached = priced["cached"]
        return ModelChoice(name, Price(
            prompt, prompt if cached is None else usd_to_micros(Decimal(cached), setting="AGENT_MODELS"),
            usd_to_micros(Decimal(priced["completion"]), setting="AGENT_MODELS")))
    if name == settings.openai_model:
        return ModelChoice(name, settings.price())  # LLM_PRICE_* price the deployment's own model
    try:
        return ModelChoice(name, price_for(name))
    except ConfigError:
        raise ConfigError(
            f"AGENT_MODELS: no price known for model {name!r}: write it as `{name}:<prompt>/<completion>` "
            "(USD per 1M tokens) so cost caps and budgets can work"
        ) from None


def per_million(price: Price) -> str:
    return f"{format_usd(price.prompt)}/{format_usd(price.completion)} per 1M tokens"


def split_run_model(text: str) -> tuple[str | None, str]:
    """``/model gpt-4o summarize this`` → (``gpt-4o``, ``summarize this``); any other text → (None, text)."""
    match = _RUN_MODEL_RE.fullmatch(text)
    if match is None:
        return None, text
    return match[1], match[2].strip()
