"""Metrics of the worker SDK, in the default prometheus-client registry.

Created on the first ``complete()`` rather than at import, so importing the SDK registers
nothing. The worker process serves or pushes them (``prometheus_client.start_http_server`` or
``push_to_gateway``); partarchive's own processes expose them on ``/metrics``.
"""

from functools import cache

from prometheus_client import Histogram


@cache
def sdk_complete_seconds() -> Histogram:
    return Histogram(
        "partarchive_sdk_complete_seconds",
        "Latency of the worker SDK's complete() call (remove from the active layer + queue append).",
        buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
    )
