"""The door's checks: is a request Slack's (its headers, then the HMAC over its raw bytes), and is its verified body
of a shape Slack sends? Pure functions of the request's parts, judged before anything parses it.

Bolt parses a request before it verifies it (malformed JSON or a non-numeric timestamp becomes a 500), so
``bot.serve.app`` asks these first and hands Bolt only verified, well-formed requests.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from typing import Any
from urllib.parse import parse_qs

from bot.errors import Refused
from bot.receive import payloads

#: Slack's replay window: a request signed longer ago than this is refused.
MAX_CLOCK_SKEW_SECONDS = 300
#: Slack's payloads are small; anything bigger is not from Slack.
MAX_BODY_BYTES = 1_000_000
MAX_TIMESTAMP_DIGITS = 12
#: ``v0=`` and a hex SHA-256.
SIGNATURE_LENGTH = 3 + 64
#: Deeper JSON than Slack ever sends; json.loads would hit the recursion limit near 1,000.
MAX_JSON_DEPTH = 64


def check_headers(secret: str, timestamp: str, signature: str, content_length: int | None) -> str:
    """Why the request cannot be Slack's, judged from its headers alone (empty when it may be)."""
    if not secret:
        return "SLACK_SIGNING_SECRET is not set: refusing every request"
    # Ten digits until the year 2286; a longer one is no timestamp (and int() of 5,000 digits raises).
    if not (0 < len(timestamp) <= MAX_TIMESTAMP_DIGITS and timestamp.isascii() and timestamp.isdigit()):
        return "X-Slack-Request-Timestamp is missing or not a number"
    if abs(time.time() - int(timestamp)) > MAX_CLOCK_SKEW_SECONDS:
        return "X-Slack-Request-Timestamp is more than 5 minutes off: stale or replayed request"
    if not (signature.startswith("v0=") and len(signature) == SIGNATURE_LENGTH):
        return "X-Slack-Signature is missing or malformed"
    if content_length is None:
        return "Content-Length is missing"
    if content_length > MAX_BODY_BYTES:
        return "the body is too large to be Slack's"
    return ""


def check_signature(secret: str, body: bytes, timestamp: str, signature: str) -> str:
    """Why the request is not Slack's (empty when it is): HMAC over the raw bytes, whatever their encoding."""
    problem = check_headers(secret, timestamp, signature, len(body))
    if problem:
        return problem
    expected = hmac.new(secret.encode(), b"v0:" + timestamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(f"v0={expected}", signature):
        return "X-Slack-Signature does not match the body"
    return ""


def check_body(body: bytes, content_type: str) -> tuple[int, str]:
    """(status, why) for a verified body that must not reach Bolt; ``(0, "")`` when it may.

    400 for what Slack never sends; 200 for a well-formed event of a type this app does not handle.
    """
    kind = "JSON" if content_type == "application/json" else "form data"
    try:
        text = body.decode()
        if content_type == "application/json":
            payloads.check_event_envelope(_json_object(text, "the JSON body"))
            return 0, ""
        form = parse_qs(text, keep_blank_values=True, strict_parsing=bool(text))
        if any(_has_surrogate(v) for values in form.values() for v in values):
            raise Refused("the form holds text that is not valid Unicode")
        if "payload" in form:
            payloads.check_interaction(_json_object(form["payload"][0], "the payload field"))
        else:
            payloads.check_command({name: values[0] for name, values in form.items()})
    except Refused as refused:
        return (200 if refused.ignore else 400), str(refused)
    except (UnicodeDecodeError, ValueError):
        return 400, f"the body is not valid {kind}"
    return 0, ""


def _json_object(text: str, what: str) -> dict[str, Any]:
    if _nesting(text) > MAX_JSON_DEPTH:
        raise Refused(f"{what} is nested too deeply")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise Refused(f"{what} is not valid JSON") from None
    if not isinstance(value, dict):
        raise Refused(f"{what} is not a JSON object")
    # The text is decoded UTF-8, so a lone surrogate can only come from a \uD800-\uDFFF escape: without one
    # there is nothing to look for (the common case; the re-encoding below costs as much as the parse).
    if _SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(value, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise Refused(f"{what} holds text that is not valid Unicode (a lone surrogate)") from None
    return value


#: A JSON escape of a UTF-16 surrogate (a pair is fine, a lone one is not: the re-encoding tells them apart).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
#: Everything but brackets, dropped before the depth is counted.
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")


def _nesting(text: str) -> int:
    """An upper bound of the JSON nesting depth, in one linear pass (brackets inside strings count too)."""
    openers = text.count("{") + text.count("[")
    if openers <= MAX_JSON_DEPTH:
        return openers  # no deeper than it has brackets (Slack's events: a few dozen)
    depth = deepest = 0
    for char in _NOT_BRACKETS.sub("", text):
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _has_surrogate(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False
