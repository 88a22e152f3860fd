"""Runs: one turn run by the engine with the workspace's tools, limits and client.

The run itself (``run``), what it writes to its thread (``outputs``) and its record
(``after``), the workspace's tool box
(``toolbox``), where tool calls may send data (``egress``), approvals asked in the thread (``approvals``, with
the request's state in Redis, ``approval_state``, and its messages, ``approval_messages``) and the Stop button's
watch (``cancel_watch``).
"""
