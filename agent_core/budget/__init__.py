"""The spend budget: its port, the in-memory and Redis ledgers, and each LLM call's hold on it.

- ``port``: the ``Budget`` port, a hold (``Reservation``) and where a budget stands (``BudgetState``);
- ``memory``: ``InMemoryBudget``, for the terminal runner and engine tests;
- ``ledger``: ``RedisBudget``, a workspace's budget in Redis (``ledger_keys``, ``layers``, ``periods``, ``scripts``);
- ``wait``, ``keeper``, ``hold``: a call's hold: reserved (waiting or shrinking), kept alive, settled or given back;
- ``late``: a settle Redis failed, made once it is back.
"""

from agent_core.budget.hold import CallHold, RunHolds
from agent_core.budget.late import LateSettles
from agent_core.budget.layers import BudgetLayer, BudgetUsage, RedisReservation
from agent_core.budget.ledger import BudgetUnavailable, RedisBudget
from agent_core.budget.memory import InMemoryBudget
from agent_core.budget.periods import Period, PeriodWindow, period_window, utc_now
from agent_core.budget.port import Budget, BudgetState, Reservation
from agent_core.budget.wait import DEFAULT_BUDGET_WAIT_SECONDS

__all__ = [
    "DEFAULT_BUDGET_WAIT_SECONDS",
    "Budget",
    "BudgetLayer",
    "BudgetState",
    "BudgetUnavailable",
    "BudgetUsage",
    "CallHold",
    "InMemoryBudget",
    "LateSettles",
    "Period",
    "PeriodWindow",
    "RedisBudget",
    "RedisReservation",
    "Reservation",
    "RunHolds",
    "period_window",
    "utc_now",
]
