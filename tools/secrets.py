"""Every secret value of a settings object, found by type, so no settings class can forget one.

Settings classes are composed (the service's ``Settings`` inherits the engine's and the tools' classes), and a
hand-written ``secrets()`` per class once lost one through ``super()``. Here the secrets are the values of
every ``SecretStr`` field, plus the credentials a URL setting may carry (``user:password@`` and query values,
as some gateways take a key there).
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

from pydantic import BaseModel, SecretStr

#: Query values shorter than this are not taken for credentials (``?v=1``).
MIN_QUERY_SECRET = 8


def secret_values(settings: BaseModel) -> list[str]:
    """The non-empty values of every ``SecretStr`` field and the credentials in every URL-valued field."""
    found: list[str] = []
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if isinstance(value, SecretStr):
            found.append(value.get_secret_value())
        elif isinstance(value, str) and "://" in value:
            found.extend(url_credentials(value))
    return [v for v in dict.fromkeys(found) if v]


def url_credentials(url: str) -> list[str]:
    """The password, user and long query values of a URL (what must never be logged or posted)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    found = [parts.password or "", parts.username or "" if parts.password else ""]
    found += [value for _, value in parse_qsl(parts.query) if len(value) >= MIN_QUERY_SECRET]
    return [v for v in found if v]
