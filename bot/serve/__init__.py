"""Serve: the processes around the pipeline.

The one start-up check (``startup``), the supervisor of web and worker processes (``supervisor``), and the
``/healthz`` and ``/metrics`` listeners (``health``, ``metrics_http``).
"""
