"""OAuth: installs and the token each workspace's calls are made with.

The install flow (``flow``) with its signed states (``state``), the encrypted installation store
(``installations``, ``token_crypto``), each workspace's token (``token_resolver``) and client (``clients``: the
one token, or the installation's), and ``python -m bot rekey`` (``rekey``).
"""
