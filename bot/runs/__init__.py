"""Runs: one turn run by the engine with the workspace's tools, limits and client.

The turn value (``turn``), the run itself (``run``) and its record (``after``), the workspace's tool box
(``toolbox``), where tool calls may send data (``egress``), approvals asked in the thread (``approvals``) and the
Stop button's watch (``cancel_watch``).
"""
