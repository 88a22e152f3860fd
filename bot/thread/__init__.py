"""Thread: what reaches Slack, and nothing else does.

The engine's events fed to a sink (``feed``) that posts replies (``sink``) or streams (``stream_sink``,
``stream_writer``, ``stream_render``, ``open_streams``; ``fallback`` to replies where Slack refuses the stream),
rendered by pure functions (``render``, ``mrkdwn``) and written in order by ``poster``; ``permalinks`` and
``slack_reader`` read back what the thread holds.
"""
