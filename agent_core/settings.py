"""AgentSettings: the engine's configuration (OPENAI_*, AGENT_* caps, price overrides), from env and .env."""

from __future__ import annotations

from decimal import Decimal
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from agent_core.attachments import vision_default
from agent_core.budget.wait import DEFAULT_BUDGET_WAIT_SECONDS
from agent_core.cost import MICROS_PER_USD, Price, price_for, transcribe_price_for, usd_to_micros
from agent_core.errors import ConfigError
from agent_core.files_in import DEFAULT_IMAGE_MAX_SIDE
from agent_core.history import DEFAULT_HISTORY_TOKENS
from agent_core.limits import Limits
from agent_core.llm import OpenAIChatLLM
from agent_core.renewal import DEFAULT_LEASE_RENEW_SECONDS, DEFAULT_LEASE_SECONDS, renewal_problem
from tools import secret_values

DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"
#: The caps' defaults are ``Limits``' own, written once there.
_LIMITS = Limits()


class AgentSettings(BaseSettings):
    """Every engine setting; each is documented in the README with its default."""

    model_config = SettingsConfigDict(env_file=".env", extra="ignore", populate_by_name=True)

    openai_api_key: SecretStr | None = Field(
        default=None, description="API key for the OpenAI-compatible endpoint."
    )
    openai_base_url: str = Field(
        default=DEFAULT_OPENAI_BASE_URL, description="Base URL of any OpenAI-compatible Chat Completions endpoint."
    )
    openai_model: str = Field(default="gpt-4o-mini", description="Model name sent with every request.")
    openai_timeout_seconds: float = Field(default=60.0, gt=0, description="Timeout of one LLM HTTP request.")
    openai_max_retries: int = Field(
        default=3, ge=0, le=10,
        description="Retries of a failed LLM call (429 except an account out of quota, 5xx, timeouts).",
    )
    openai_stream: bool = Field(
        default=True, description="Stream answers (server-sent events); false for endpoints that do not stream."
    )
    openai_api_version: str | None = Field(
        default=None,
        description="Azure OpenAI: sent as the `api-version` query, with OPENAI_API_KEY as the `api-key` header.",
    )
    openai_max_connections: int = Field(
        default=0, ge=0,
        description="Connections to the LLM endpoint per process; 0: no cap of its own (one per run in flight).",
    )
    openai_tokenizer: Literal["auto", "o200k_base", "cl100k_base", "bytes"] = Field(
        default="auto",
        description="Tokenizer of the offline counts: `auto` is the model's own for OpenAI models, else o200k_base "
        "with a 25% margin; the provider's reported usage corrects the counts as a run goes.",
    )
    openai_vision: bool | None = Field(
        default=None,
        description="The model takes images (image parts of the user message); unset: decided by the model's name.",
    )
    openai_transcribe_model: str | None = Field(
        default=None,
        description="Model of the endpoint's /audio/transcriptions for audio files (e.g. whisper-1); unset: none.",
    )
    openai_transcribe_price_per_minute: Decimal | None = Field(
        default=None,
        description="Price of OPENAI_TRANSCRIBE_MODEL, USD per minute of audio (default: the price table's, e.g. "
        "whisper-1 0.006); each transcription is charged to the run's cost and the workspace budget.",
    )
    agent_image_max_side: int = Field(
        default=DEFAULT_IMAGE_MAX_SIDE, ge=64, le=8192,
        description="Images are resized so their longer side is at most this many pixels before they are sent.",
    )
    agent_max_steps: int = Field(default=_LIMITS.max_steps, gt=0, description="LLM calls per run.")
    agent_max_tokens: int = Field(
        default=_LIMITS.max_tokens, gt=0, description="Prompt + completion tokens per run."
    )
    agent_max_cost_usd: Decimal = Field(
        default=Decimal(_LIMITS.max_cost_micros) / MICROS_PER_USD, ge=0, description="Cost cap per run, USD."
    )
    agent_max_seconds: float = Field(
        default=_LIMITS.max_seconds, gt=0, description="Wall-clock cap per run, seconds."
    )
    agent_no_progress_steps: int = Field(
        default=_LIMITS.no_progress_steps, gt=0, description="Idle steps in a row before stopping."
    )
    agent_max_completion_tokens: int = Field(
        default=_LIMITS.max_completion_tokens, gt=0, description="Completion cap of one LLM call."
    )
    agent_history_tokens: int = Field(
        default=DEFAULT_HISTORY_TOKENS, gt=0,
        description="Token budget of the conversation history sent with each request.",
    )
    agent_protocol: Literal["tools", "react"] = Field(
        default="tools", description="`tools`: native tool calling; `react`: text Thought/Action protocol."
    )
    agent_note_role: Literal["system", "user"] = Field(
        default="system",
        description="Role of the progress note: `user` for chat templates that allow a system message only first.",
    )
    agent_system_prompt: str | None = Field(default=None, description="Replaces the built-in system prompt.")
    agent_lease_seconds: float = Field(
        default=DEFAULT_LEASE_SECONDS, gt=0,
        description="A run's lease and its budget holds lapse this long after the last renewal.",
    )
    agent_lease_renew_seconds: float = Field(
        default=DEFAULT_LEASE_RENEW_SECONDS, gt=0, description="How often the running worker renews them."
    )
    agent_budget_wait_seconds: float = Field(
        default=DEFAULT_BUDGET_WAIT_SECONDS, ge=0,
        description="How long a call waits for other runs' budget holds before it settles for a smaller call.",
    )
    llm_price_prompt_per_1m: Decimal | None = Field(default=None, description="Prompt price override, USD per 1M.")
    llm_price_completion_per_1m: Decimal | None = Field(
        default=None, description="Completion price override, USD per 1M."
    )
    llm_price_cached_prompt_per_1m: Decimal | None = Field(
        default=None, description="Cached-prompt price override, USD per 1M (default: the prompt price)."
    )

    def limits(self) -> Limits:
        return Limits(
            max_steps=self.agent_max_steps,
            max_tokens=self.agent_max_tokens,
            max_cost_micros=usd_to_micros(self.agent_max_cost_usd, setting="AGENT_MAX_COST_USD"),
            max_seconds=self.agent_max_seconds,
            no_progress_steps=self.agent_no_progress_steps,
            max_completion_tokens=self.agent_max_completion_tokens,
        )

    def vision(self) -> bool:
        """Whether the model is sent images: ``OPENAI_VISION``, else decided by the model's name."""
        return vision_default(self.openai_model) if self.openai_vision is None else self.openai_vision

    def llm(self) -> OpenAIChatLLM:
        """A client of the OpenAI-compatible endpoint these settings name (its key checked by ``require_llm``)."""
        assert self.openai_api_key is not None  # require_llm refused it otherwise
        return OpenAIChatLLM(
            api_key=self.openai_api_key.get_secret_value(),
            base_url=self.openai_base_url,
            model=self.openai_model,
            timeout=self.openai_timeout_seconds,
            max_retries=self.openai_max_retries,
            stream=self.openai_stream,
            api_version=self.openai_api_version or None,
            max_connections=self.openai_max_connections,
        )

    def check_leases(self) -> None:
        """Refuse, at start-up, lease timings under which a lease or a budget hold could lapse under a live run.

        Raises ConfigError naming the settings. Holds are renewed while their call runs, so no call timeout
        (``OPENAI_TIMEOUT_SECONDS``, ``AGENT_MAX_SECONDS``) can outlive one; only the renewal cadence can.
        """
        problem = renewal_problem(
            self.agent_lease_seconds, self.agent_lease_renew_seconds,
            names=("AGENT_LEASE_SECONDS", "AGENT_LEASE_RENEW_SECONDS"),
        )
        if problem is not None:
            raise ConfigError(problem)

    def require_llm(self) -> Price:
        """The model's price, once the endpoint's key is set; ConfigError naming the setting that is missing.

        Everything a process that runs agents needs from these settings, checked at start-up (``bot.serve.startup``).
        """
        if self.openai_api_key is None or not self.openai_api_key.get_secret_value().strip():
            raise ConfigError("OPENAI_API_KEY is not set: set it to the API key of your OpenAI-compatible endpoint")
        self.transcribe_price()  # and so does a transcription model without a price
        return self.price()  # an unknown model without price overrides fails here

    def price(self) -> Price:
        return price_for(
            self.openai_model,
            prompt_per_1m=self.llm_price_prompt_per_1m,
            completion_per_1m=self.llm_price_completion_per_1m,
            cached_prompt_per_1m=self.llm_price_cached_prompt_per_1m,
        )

    def transcribe_price(self) -> int | None:
        """Micro-dollars a minute of ``OPENAI_TRANSCRIBE_MODEL`` (None: no transcription); ConfigError when unknown."""
        if not self.openai_transcribe_model:
            return None
        return transcribe_price_for(self.openai_transcribe_model, self.openai_transcribe_price_per_minute)

    def secrets(self) -> list[str]:
        """Values that must never appear in a post, a log or a trace."""
        return secret_values(self)
