"""``python -m bench [section ...]``: run the benchmark sections and print their tables."""

from __future__ import annotations

import sys

from archiver.logs import configure_logging
from bench import (
    archiver_bench,
    cluster_bench,
    codec_bench,
    dashboard_bench,
    find_bench,
    growth_bench,
    http_bench,
    latency_bench,
    memory_bench,
    migrate_bench,
    pressure_bench,
    runtime_bench,
    scrape_bench,
    stats_bench,
    tiers_bench,
    worker_bench,
)

SECTIONS = {
    "codec": codec_bench.run,
    "latency": latency_bench.run,
    "http": http_bench.run,
    "stats": stats_bench.run,
    "memory": memory_bench.run,
    "migrate": migrate_bench.run,
    "tiers": tiers_bench.run,
    "cluster": cluster_bench.run,
    "dashboard": dashboard_bench.run,
    "archiver": archiver_bench.run,
    "worker": worker_bench.run,
    "growth": growth_bench.run,
    "pressure": pressure_bench.run,
    "runtime": runtime_bench.run,
    "scrape": scrape_bench.run,
    "find": find_bench.run,
}


def main(argv: list[str]) -> int:
    configure_logging("warning")
    names = argv or list(SECTIONS)
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        print(f"bench: unknown section {unknown[0]!r}; choose from {', '.join(SECTIONS)}", file=sys.stderr)
        return 2
    for name in names:
        text, _ok = SECTIONS[name]()
        print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
