"""Receive: a Slack request or Socket Mode envelope reaches a listener.

The HTTP front door's defences (``http_guard``), the verified body's shape (``payloads``), one claim per delivery
(``dedupe``), Socket Mode's connection (``socket_mode``), what every listener is handed (``deps``) and Bolt's
listeners (``listeners/``), which hand a turn to the queue or answer a command, a button or App Home at once, with
the App Home tab and modals they publish built by pure views (``views/``).
"""
