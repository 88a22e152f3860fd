"""How an endpoint's error reads: an account out of quota or credit (waiting never fixes it) against a rate limit
(waiting does), whatever shape the provider or a gateway in front of it gives the error.

Shapes read, all ``{"error": {...}}`` or close to it:

- OpenAI: 429, ``code``/``type`` ``insufficient_quota``.
- LiteLLM's proxy: every provider 429 is ``type: "throttling_error"``, ``code: "429"``, the provider's own words in
  ``message`` (``litellm.RateLimitError: ... OpenAIException - You exceeded your current quota ...``); its own
  budgets are ``type: "budget_exceeded"`` (a 400); an Anthropic account without credit is a 400 whose message says
  "credit balance is too low".
- 402 Payment Required (OpenRouter and other gateways' "insufficient credits").
- ``{"error": "text"}`` and FastAPI's ``{"detail": ...}``, as some gateways answer.

A message naming a per-second or per-minute window is a rate limit even when it says "quota" (Vertex AI's
"Quota exceeded for ... requests_per_minute").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agent_core.errors import LLMCause

#: ``error.code`` / ``error.type`` values that mean the account (or the gateway's budget for it) is used up.
QUOTA_CODES = frozenset({
    "insufficient_quota", "budget_exceeded", "billing_hard_limit_reached", "billing_not_active",
    "insufficient_credits", "credit_balance_too_low", "quota_exceeded", "payment_required",
})
_QUOTA_WORDS = re.compile(
    r"insufficient[_ ](?:quota|credits?|funds|balance)|exceeded your current quota|quota (?:has been )?"
    r"(?:exhausted|exceeded)|credit balance is too low|(?:check|upgrade) your (?:plan|billing)|billing details"
    r"|budget (?:has been )?exceeded|exceeded (?:the|your) budget|out of credits|payment required",
    re.IGNORECASE,
)
_RATE_WINDOW = re.compile(r"per[ _-]?(?:second|minute)|\b(?:rpm|tpm|rps)\b", re.IGNORECASE)


def error_fields(body: Any) -> dict[str, Any]:
    """The error object of an error body (``{}`` when there is none); a bare string is its ``message``."""
    if not isinstance(body, dict):
        return {}
    inner = body.get("error", body.get("detail", body))
    if isinstance(inner, dict) and isinstance(inner.get("error"), dict | str):
        inner = inner["error"]  # FastAPI's {"detail": {"error": {...}}}
    if isinstance(inner, str):
        return {"message": inner}
    return inner if isinstance(inner, dict) else {}


def out_of_quota(status: int | None, error: Mapping[str, Any]) -> bool:
    """The account or the gateway's budget is used up: retrying cannot help."""
    if status == 402:
        return True
    if {str(error.get("code") or ""), str(error.get("type") or "")} & QUOTA_CODES:
        return True
    message = str(error.get("message") or "")
    return bool(_QUOTA_WORDS.search(message)) and not _RATE_WINDOW.search(message)


def cause_of(status: int, error: Mapping[str, Any]) -> LLMCause:
    """Why a call answered ``status`` with ``error`` failed."""
    if out_of_quota(status, error):
        return "quota"
    if status == 429:
        return "rate_limited"
    if status in (401, 403):
        return "auth"
    return "server_error" if status >= 500 else "bad_request"


def retryable(status: int, cause: LLMCause) -> bool:
    """Whether waiting may help: a rate limit or a server error, never an account out of quota."""
    return cause != "quota" and (status == 429 or status >= 500)
