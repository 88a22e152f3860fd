"""A workspace's rules, by job: ``settings`` (what is stored: limits, tool rules, display, models, channels' own
agents), ``spend`` (the budget ledger, usage counters, an org's budget, feedback) and ``admin`` (``/agent-limits``:
its grammar, handlers and replies, and who may do what). Each subpackage's ``__init__`` is its face; code outside
a subpackage imports from that face only (``tests/test_boundaries.py``). ``parts`` wires them once per process.
"""

from bot.workspace.parts import WorkspaceParts
from bot.workspace.shapes import DISPLAYS, VERBOSITIES, Display, Verbosity

__all__ = [
    "DISPLAYS",
    "VERBOSITIES",
    "Display",
    "Verbosity",
    "WorkspaceParts",
]
