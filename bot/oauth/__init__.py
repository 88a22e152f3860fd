"""OAuth: installs and the token each workspace's calls are made with.

The install flow (``flow``) with its signed states (``state``), the encrypted installation store
(``installations``, ``token_crypto``), each workspace's token (``token_resolver``) and client (``clients``: the
one token, or the installation's), and ``python -m bot rekey`` (``rekey``). Per-person sign-in to ``"auth": "user"``
MCP servers: ``mcp_signin`` (the face), ``mcp_discovery`` and ``mcp_flow`` (the MCP authorization flow, split
between the process that offers it and the web process that receives its callback, ``mcp_callback``),
``mcp_vault`` (tokens, clients and states, encrypted), ``mcp_credentials`` (a run's tokens) and ``mcp_blocks``.
"""
