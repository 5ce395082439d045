"""Codec section: bytes per partition and encode/decode time per batch, standard workload."""

from __future__ import annotations

import zstandard

from bench.report import median, sample_us, table
from bench.workload import standard_workload
from codec import WorkerNumbering, decode_blob, encode_blob, encode_text
from codec.framing import ZSTD_LEVEL

TARGET_BYTES = 4.0
TARGET_DECODE_US = 100.0


def run(batches: int = 200) -> tuple[str, bool]:
    rows = []
    ok = True
    for size in (100, 1000):
        records = list(standard_workload(size * batches))
        workers = WorkerNumbering({i: f"worker{i}" for i in range(1, 33)})
        chunks = [records[i : i + size] for i in range(0, len(records), size)]
        text_bytes = sum(len(encode_text(c, workers).encode()) for c in chunks)
        zctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
        text_zstd = sum(len(zctx.compress(encode_text(c, workers).encode())) for c in chunks)
        blobs = [encode_blob(c, workers) for c in chunks]
        columnar = sum(map(len, blobs))
        text_blobs = [encode_blob(c, workers, fmt="text") for c in chunks]
        n = len(records)
        runs = 2000 if size == 100 else 300
        enc = sample_us(lambda c=chunks[7], w=workers: encode_blob(c, w), runs)
        dec = sample_us(lambda b=blobs[7], w=workers: decode_blob(b, w), runs)
        dec_text = sample_us(lambda b=text_blobs[7], w=workers: decode_blob(b, w), runs)
        assert decode_blob(blobs[7], workers) == chunks[7]
        rows.append((size, text_bytes / n, text_zstd / n, columnar / n, median(enc), median(dec), median(dec_text)))
        if size == 100:
            ok = columnar / n <= TARGET_BYTES and median(dec) < TARGET_DECODE_US
    out = table(
        "codec: standard workload, bytes per partition (whole framed blob) and time per batch (median)",
        ["batch", "text B/p", "text+zstd B/p", "columnar B/p", "encode us", "decode us", "text decode us"],
        rows,
    )
    out += (
        f"target: columnar at batch 100 <= {TARGET_BYTES} B/partition, decode < {TARGET_DECODE_US:.0f} us: "
        f"{'met' if ok else 'MISSED'}\n"
    )
    return out, ok
