"""Serve: the processes around the pipeline.

The running service's roles (``service``: web and/or worker), the aiohttp app around Bolt (``app``), the one
start-up check (``startup``), the supervisor of web and worker processes (``supervisor``), and the ``/healthz``
and ``/metrics`` listeners (``health``, ``metrics_http``). The top of the drawing: nothing in ``bot`` imports it
but the package's entry points.
"""
