"""Private text split across the outbound calls of one run: ``?d=zeta-77`` now, ``?d=31-quartz`` next.

Each piece is too short to be recognised alone, so the run remembers what its outbound calls carried, by slot (a
query parameter of a host, the last path segment, the subdomain labels, an argument of a tool), and checks
each new piece joined to what its slot carried before; and all the pieces of a tool joined in call order, for a
secret spread over different parameters. Pieces are remembered whether the call was held back or not: a call
held for another reason may be retried elsewhere with the rest (fail closed)::

    watch = SplitWatch(urls_in)   # the guard's URL finder
    watch.find(index, "fetch_url", {"url": "https://x.test/?d=zeta-77"})    # None: too short alone
    watch.find(index, "fetch_url", {"url": "https://x.test/?d=31-quartz"})  # ("...", Leak(..., "split over calls"))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from yarl import URL

from tools.leaks import Leak, LeakIndex

#: Characters of earlier pieces kept per slot: more than any secret, little enough to check each call quickly.
SLOT_CHARS = 512
#: Slots kept per run; past it new slots are not remembered (a run with this many different outbound places
#: is held by the destination rule long before).
MAX_SLOTS = 1024
SPLIT = "split over calls"
Slot = tuple[str, ...]


class SplitWatch:
    """One run's outbound pieces, by slot."""

    def __init__(self, urls_in: Callable[[str], Iterable[str]]) -> None:
        self._urls_in = urls_in
        self._slots: dict[Slot, str] = {}

    def find(
        self, index: LeakIndex, tool: str, arguments: Mapping[str, Any], scrub: Callable[[str], str] = str
    ) -> tuple[str, Leak] | None:
        """The first private token that ``arguments``' pieces carry joined to earlier pieces of their slot (the
        piece, and the leak); the pieces are remembered either way. ``scrub`` takes out what never counts
        (the requester's own URLs)."""
        pieces = [(slot, value) for slot, value in self._pieces(tool, arguments, scrub) if value]
        whole = (tool, "*")
        pieces.append((whole, "".join(value for _, value in pieces)))
        found: tuple[str, Leak] | None = None
        for slot, value in pieces:
            before = self._slots.get(slot, "")
            if found is None and before and index:
                leak = index.find(before + value)
                if leak is not None:
                    how = SPLIT if leak.encoding == "plain" else f"{SPLIT}, {leak.encoding}"
                    found = value, Leak(leak.fragment, how)
            if slot in self._slots or len(self._slots) < MAX_SLOTS:
                self._slots[slot] = (before + value)[-SLOT_CHARS:]
        return found

    def _pieces(self, tool: str, value: Any, scrub: Callable[[str], str], path: str = "") -> Iterator[tuple[Slot, str]]:
        if isinstance(value, Mapping):
            for key, item in value.items():
                yield from self._pieces(tool, item, scrub, f"{path}.{key}")
        elif isinstance(value, list | tuple):
            for item in value:
                yield from self._pieces(tool, item, scrub, f"{path}[]")
        elif isinstance(value, str):
            text = scrub(value)
            for url in self._urls_in(text):
                yield from _url_pieces(tool, url)
                text = text.replace(url, " ")
            yield (tool, "arg", path), text.strip()


def _url_pieces(tool: str, raw: str) -> Iterator[tuple[Slot, str]]:
    try:
        url = URL(raw)
    except ValueError:
        return
    host = (url.host or "").lower()
    labels = host.split(".")
    site = ".".join(labels[-2:])
    yield (tool, "labels", site), ".".join(labels[:-2])
    for name, item in url.query.items():
        yield (tool, "query", site, name), item
    segments = [s for s in url.path.split("/") if s]
    if segments:
        yield (tool, "segment", site), segments[-1]
    yield (tool, "fragment", site), url.fragment
