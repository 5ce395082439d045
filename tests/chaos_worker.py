"""A worker process for the chaos harness: claims and completes partitions until killed.

It prints one line per typed refusal it meets (``oom``), which the harness counts; any other
error it cannot ride out makes it exit non-zero, which the harness reports.
"""

from __future__ import annotations

import sys
import time

import redis

from layers import ActiveLayer, InvalidTransition, NotOwner, OutOfMemory, PartitionNotFound


def main(url: str, namespace: str, name: str, delay_s: float) -> int:
    client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)
    sdk = ActiveLayer(client, namespace, lease_timeout=2.0)
    while True:
        try:
            part = sdk.claim(name)
            if part is None:
                time.sleep(0.05)
                continue
            time.sleep(delay_s)
            sdk.complete(part.partition_id, name)
        except OutOfMemory:
            print("oom", flush=True)
            time.sleep(0.1)
        except (NotOwner, InvalidTransition, PartitionNotFound):
            print("lost lease", flush=True)  # taken over while Redis was paused: another worker has it
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
            time.sleep(0.1)
        except redis.ResponseError as exc:  # a restarted server still loading, or a paused one
            if "LOADING" not in str(exc):
                raise
            time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])))
