"""The engine's own Redis keys: a thread's history, progress and trace, under one global prefix.

A thread id is opaque to the engine. One shape gets a layout of its own: an id of four ``/``-separated parts
``a/b/c/d`` (no ``{}:`` or spaces in them) is stored under ``P:a:b:{c:d}``. The caller's namespace (the first
two parts) stays outside the ``{...}`` hash tag and the thread inside it, so one thread's keys share one Redis
Cluster slot (one MULTI or script may touch them all) while a caller can still scan or expire a namespace.
Any other id is a local name (the terminal runner's) and lives under ``P:local:{name}``::

    P:a:b:{c:d}:history       list of LLM-facing messages (RPUSH per step)
    P:a:b:{c:d}:progress      JSON Progress (task, step, status, findings)
    P:a:b:{c:d}:trace         list of JSON trace records
    P:a:b:{c:d}:transcripts   hash "model:sha256 of the audio" -> its transcript (``transcripts.py``)
    {P:lease:Q}:holders       hash run id -> holder of its lease, for the runs of queue Q (``lease.py``)
    {P:lease:Q}:expiries      zset run id -> lease expiry (Redis server ms): a lapsed run is found here
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

#: Default global prefix; a deployment sharing a Redis sets its own (tests use a per-test one).
DEFAULT_KEY_PREFIX = "agent"
_PART = re.compile(r"[^{}/: ]+")


@lru_cache(maxsize=4096)
def _thread_base(prefix: str, thread: str) -> str:
    # Cached: a step's write names three keys of one thread (a split and four regex matches each).
    parts = thread.split("/")
    if len(parts) == 4 and all(_PART.fullmatch(p) for p in parts):
        scope, group, item = ":".join(parts[:2]), parts[2], parts[3]
        return f"{prefix}:{scope}:{{{group}:{item}}}"
    safe = thread.replace("{", "(").replace("}", ")")
    return f"{prefix}:local:{{{safe}}}"


@dataclass(frozen=True, slots=True)
class Keys:
    """Builds the engine's keys from the global ``prefix``."""

    prefix: str = DEFAULT_KEY_PREFIX

    def thread_base(self, thread: str) -> str:
        return _thread_base(self.prefix, thread)

    def history(self, thread: str) -> str:
        return f"{self.thread_base(thread)}:history"

    def progress(self, thread: str) -> str:
        return f"{self.thread_base(thread)}:progress"

    def trace(self, thread: str) -> str:
        return f"{self.thread_base(thread)}:trace"

    def transcripts(self, thread: str) -> str:
        return f"{self.thread_base(thread)}:transcripts"

    def leases(self, queue: str) -> tuple[str, str]:
        """The lease holders hash and expiries zset of ``queue``: one hash tag, so one script touches both."""
        if not queue or any(c in queue for c in "{} "):
            raise ValueError(f"a lease queue name must be non-empty, without braces or spaces, got {queue!r}")
        base = f"{{{self.prefix}:lease:{queue}}}"
        return f"{base}:holders", f"{base}:expiries"
