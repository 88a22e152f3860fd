"""Every Redis key the service writes: one global prefix, a team/enterprise namespace, a ``{thread}`` hash tag.

Layout (``P`` is the configurable prefix, ``E`` the enterprise id or ``-``, ``T`` the team id)::

    P:E:T:{C:ts}:history       list of LLM-facing messages (RPUSH per step)
    P:E:T:{C:ts}:progress      JSON Progress (task, step, status, findings)
    P:E:T:{C:ts}:trace         list of JSON trace records
    P:E:T:{C:ts}:inbox         ids of the turns waiting for the thread's single run slot, oldest first
    P:E:T:{C:ts}:turns         hash turn id -> the turn (who asked what, where to reply)
    P:E:T:{C:ts}:lock          the run slot (value: the job holding it)
    P:E:T:{C:ts}:run:R         hash of run R's Slack bookkeeping (reply ts, requester, posted steps)
    P:E:T:{C:ts}:cancel:R      set when run R was asked to stop (a pub/sub message is sent too)
    P:E:T:{C:ts}:approval:R:A  approval request A of run R: ``pending``, then its decision (also published)
    P:E:T:dedupe:ev:ID         an Events API delivery already taken
    P:E:T:dedupe:msg:C:ts      a human message already taken (app_mention and message share it)
    P:E:T:settings             per-workspace settings (verbosity)
    P:E:T:limits               per-workspace limit overrides (hash)
    P:E:T:limits:audit         capped list of limit changes (who, when, old -> new)
    P:E:T:runs                 capped list of recent run summaries (App Home)
    {P:E:T}:budget:PERIOD:...  budget ledger (spent, held, expiries, settled); the whole namespace is the
                               hash tag, so one workspace's budget scripts touch one Cluster slot
    P:E:T:rl:...               rate-limit pacing state

The hash tag holds channel and ts only: a thread's keys share one Redis Cluster slot, so one MULTI or script
may touch them all. The team is outside the tag but inside the key, so a Slack Connect channel (same channel id
in two organisations) still gets one namespace per workspace.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Default global prefix; a deployment sharing a Redis sets its own (tests use a per-test one).
DEFAULT_KEY_PREFIX = "agent"
_SEP = "/"


@dataclass(frozen=True, slots=True)
class ThreadRef:
    """One conversation: a Slack thread inside one workspace installation.

    ``str(ref)`` is the thread id handed to the engine (``agent.events(thread=...)``); ``ThreadRef.parse``
    reads it back.
    """

    team_id: str
    channel_id: str
    thread_ts: str
    enterprise_id: str = ""

    def __post_init__(self) -> None:
        for name in ("team_id", "channel_id", "thread_ts"):
            value = getattr(self, name)
            if not value or any(c in value for c in "{}/: "):
                raise ValueError(f"ThreadRef.{name} must be a non-empty Slack id, got {value!r}")
        if any(c in self.enterprise_id for c in "{}/: "):
            raise ValueError(f"ThreadRef.enterprise_id must be a Slack id, got {self.enterprise_id!r}")

    def __str__(self) -> str:
        return _SEP.join((self.enterprise_id or "-", self.team_id, self.channel_id, self.thread_ts))

    @classmethod
    def parse(cls, thread: str) -> ThreadRef:
        parts = thread.split(_SEP)
        if len(parts) != 4:
            raise ValueError(f"not a thread id (enterprise/team/channel/ts): {thread!r}")
        enterprise, team, channel, ts = parts
        return cls(team, channel, ts, "" if enterprise == "-" else enterprise)


@dataclass(frozen=True, slots=True)
class Keys:
    """Builds every key from the global ``prefix``; the only place key strings are spelt."""

    prefix: str = DEFAULT_KEY_PREFIX

    def namespace(self, team_id: str, enterprise_id: str = "") -> str:
        return f"{self.prefix}:{enterprise_id or '-'}:{team_id}"

    def thread_base(self, thread: str) -> str:
        """``P:E:T:{C:ts}`` for a Slack thread id; ``P:local:{name}`` for any other name (terminal runs)."""
        try:
            ref = ThreadRef.parse(thread)
        except ValueError:
            safe = thread.replace("{", "(").replace("}", ")")
            return f"{self.prefix}:local:{{{safe}}}"
        return f"{self.namespace(ref.team_id, ref.enterprise_id)}:{{{ref.channel_id}:{ref.thread_ts}}}"

    def history(self, thread: str) -> str:
        return f"{self.thread_base(thread)}:history"

    def progress(self, thread: str) -> str:
        return f"{self.thread_base(thread)}:progress"

    def trace(self, thread: str) -> str:
        return f"{self.thread_base(thread)}:trace"

    def inbox(self, thread: str) -> str:
        return f"{self.thread_base(thread)}:inbox"

    def turns(self, thread: str) -> str:
        return f"{self.thread_base(thread)}:turns"

    def lock(self, thread: str) -> str:
        return f"{self.thread_base(thread)}:lock"

    def run(self, thread: str, run_id: str) -> str:
        return f"{self.thread_base(thread)}:run:{run_id}"

    def cancel(self, thread: str, run_id: str) -> str:
        """Both the flag key and the pub/sub channel a Stop press is announced on."""
        return f"{self.thread_base(thread)}:cancel:{run_id}"

    def approval(self, thread: str, run_id: str, request_id: str) -> str:
        """Both the state of one approval request and the pub/sub channel its decision is announced on."""
        return f"{self.thread_base(thread)}:approval:{run_id}:{request_id}"

    def dedupe_event(self, team_id: str, enterprise_id: str, event_id: str) -> str:
        return f"{self.namespace(team_id, enterprise_id)}:dedupe:ev:{event_id}"

    def dedupe_message(self, team_id: str, enterprise_id: str, channel_id: str, ts: str) -> str:
        return f"{self.namespace(team_id, enterprise_id)}:dedupe:msg:{channel_id}:{ts}"

    def workspace_settings(self, team_id: str, enterprise_id: str = "") -> str:
        return f"{self.namespace(team_id, enterprise_id)}:settings"

    def limits(self, team_id: str, enterprise_id: str = "") -> str:
        return f"{self.namespace(team_id, enterprise_id)}:limits"

    def limits_audit(self, team_id: str, enterprise_id: str = "") -> str:
        return f"{self.namespace(team_id, enterprise_id)}:limits:audit"

    def recent_runs(self, team_id: str, enterprise_id: str = "") -> str:
        return f"{self.namespace(team_id, enterprise_id)}:runs"

    def rate(self, team_id: str, enterprise_id: str, what: str) -> str:
        return f"{self.namespace(team_id, enterprise_id)}:rl:{what}"

    def job_id(self, kind: str, thread: str, turn: str) -> str:
        """An arq job id: arq's own keys (``arq:job:<id>``) then carry the prefix too."""
        return f"{self.prefix}:{kind}:{thread}:{turn}"
