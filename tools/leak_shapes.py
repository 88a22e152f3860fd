"""Secret shapes in private text that the token rule of ``tools.leaks`` misses: card numbers written with spaces,
phone numbers, and short values after a label (``password: hunter22``, ``PIN 4821``, ``the code is 480913``,
``passphrase: correct horse battery staple``).

``secret_values`` returns them as ``tools.leaks`` matches tokens: lower case, separators dropped. A value of
``MIN_TOKEN_CHARS`` or more is an ordinary private token; a shorter one (a PIN, an MFA code, a short password) is
matched only as a whole word of the outbound text, so ``4821`` does not match inside ``948217``::

    >>> sorted(secret_values("card 4111 1111 1111 1111, PIN: 4821"))
    ['4111111111111111', '4821']
"""

from __future__ import annotations

import re

#: Shortest labelled value kept (a 4-digit PIN); shorter ones are too common to hold anything back for.
MIN_VALUE_CHARS = 4
#: Words of a passphrase that identify it: a leak of the phrase carries its first words in order.
PASSPHRASE_WORDS = 3

_CARD = re.compile(r"(?<![\d.])\d(?:[ -]?\d){12,18}(?!\d|\.\d)")
# A country code or area code in brackets, then groups of digits: 8 to 15 digits in all (E.164's most).
_PHONE = re.compile(r"(?<![\w+.])(\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{2,4}(?:[ .-]\d{2,4}){1,4}(?!\w|\.\d)")
_DATE = re.compile(r"^\d{4}[-./]\d{1,2}[-./]\d{1,2}$|^\d{1,2}[-./]\d{1,2}[-./]\d{2,4}$")
_LABEL = (r"pass(?:word|wd|code|phrase)|pwd|pin(?:\s+code)?|(?:mfa|otp|2fa|one[- ]time|verification|security|"
          r"launch|access|door|alarm|safe)\s+code|code(?:\s*name)?|secret|otp")
_VALUE = re.compile(
    rf"\b(?P<label>{_LABEL})\b(?:\s+(?:is|was|will be|reads|=))?\s*[:=]?\s*"
    # The value is looked at, not consumed: the next label may stand right after it ("PIN 4821 password x").
    r"(?=[\"'`“‘](?P<quoted>[^\"'`”’\n]{1,64})[\"'`”’]|(?P<words>[^\s\"'`,;]+(?:[ \t]+[^\s\"'`,;]+){0,5}))",
    re.IGNORECASE,
)
_NON_ALNUM = re.compile(r"[^a-z0-9]+")
#: Words after a label that are prose, not the value ("the password is required", "code is on GitHub").
_PROSE = frozenset(
    "a an the is are was be been being in on at of for to from by with and or not no none null empty set unset "
    "required needed missing wrong incorrect invalid expired changed reset rotated same different below above "
    "here there this that it its see ask sent stored saved hidden redacted secret protected strong weak secure "
    "review reviews base repo repository please will should must can".split()
)


def secret_values(text: str) -> set[str]:
    """The card numbers, phone numbers and labelled values in ``text`` (lower case, separators dropped)."""
    found: set[str] = set()
    for match in _CARD.finditer(text):
        digits = re.sub(r"\D", "", match.group())
        if luhn(digits):
            found.add(digits)
    for match in _PHONE.finditer(text):
        raw = match.group()
        digits = re.sub(r"\D", "", raw)
        if 8 <= len(digits) <= 15 and not _DATE.match(raw):
            found.add(digits)
            if match.group(1):  # the number as dialled at home, without its country code
                found.add(re.sub(r"\D", "", raw[len(match.group(1)):]))
    for match in _VALUE.finditer(text):
        found.update(_labelled(match))
    return {v for v in found if len(v) >= MIN_VALUE_CHARS}


def luhn(digits: str) -> bool:
    """The card-number checksum (ISO/IEC 7812): every second digit from the right doubled."""
    if not digits.isdigit():
        return False
    total = 0
    for i, char in enumerate(reversed(digits)):
        n = int(char) * (2 if i % 2 else 1)
        total += n - 9 if n > 9 else n
    return total % 10 == 0


def _labelled(match: re.Match[str]) -> set[str]:
    label = match.group("label").lower()
    if match.group("quoted"):
        return {_squash(match.group("quoted"))}
    words = [w.strip(".!?)(") for w in match.group("words").split()]
    words = [w for w in words if w]
    if not words or words[0].lower() in _PROSE:
        return set()
    if label.startswith("passphrase"):
        return {_squash(" ".join(words[:PASSPHRASE_WORDS]))}
    value = _squash(words[0])
    generic = label.startswith("code") and "name" not in label
    if (generic or label.startswith("pin")) and not any(c.isdigit() for c in value):
        return set()  # "code" and "PIN" alone are prose unless a number follows ("the code review")
    return {value}


def _squash(text: str) -> str:
    return _NON_ALNUM.sub("", text.lower())
