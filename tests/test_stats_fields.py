"""Range hashes name workers by registry number; ID-named fields of earlier versions still read."""

from __future__ import annotations

from collections.abc import Iterable

from hypothesis import given
from hypothesis import strategies as st

from codec import WorkerNumbering
from stats.fields import by_worker_id, per_worker, to_numbered, worker_ids

RANGE_TOTALS = {"count": 9, "data": 900, "duration": 50, "min_id": 1, "max_id": 900, "first_at": 3, "last_at": 7}
# any text a worker ID may be, including what looks like a numbered field or has ':' in it
worker_id = st.one_of(
    st.text(st.characters(blacklist_categories=["Cc", "Cs"]), min_size=1, max_size=12),
    st.sampled_from(["#1", "#1c", "#2:c", "w:1", "count", "1"]),
)


@given(st.dictionaries(worker_id, st.tuples(*[st.integers(0, 10**12)] * 3), min_size=1, max_size=8))
def test_id_named_fields_numbered_and_read_back_are_the_same(workers: dict[str, tuple[int, int, int]]) -> None:
    fields = dict(RANGE_TOTALS)
    for w, (c, d, p) in workers.items():
        fields.update({f"{w}:c": c, f"{w}:d": d, f"{w}:p": p})
    numbers = WorkerNumbering()

    def shorts(ids: Iterable[str]) -> dict[str, int]:
        return {w: numbers.short_id(w) for w in ids}

    stored = to_numbered(fields, shorts)
    assert {name for name in stored if name not in RANGE_TOTALS} == {
        f"#{numbers.short_id(w)}{k}" for w in workers for k in "cdp"
    }
    assert by_worker_id(stored, numbers.lookup_table()) == fields
    assert per_worker(by_worker_id(stored, numbers.lookup_table())) == {
        w: dict(zip("cdp", v, strict=True)) for w, v in workers.items()
    }


def test_a_range_written_across_the_upgrade_adds_both_namings() -> None:
    stored = {"count": 5, "w:1:c": 2, "w:1:d": 20, "w:1:p": 200, "#3c": 3, "#3d": 30, "#3p": 300, "#9c": 1}
    fields = by_worker_id(stored, {3: "w:1"})
    assert fields == {"count": 5, "w:1:c": 5, "w:1:d": 50, "w:1:p": 500, "#9c": 1}
    assert per_worker(fields) == {"w:1": {"c": 5, "d": 50, "p": 500}, "#9": {"c": 1, "d": 0, "p": 0}}


def test_the_registry_reply_is_read_strictly() -> None:
    assert worker_ids({b"1": b"a", b"02": b"b", b"x": b"c", b"3": "d", b"": b"e"}) == {1: "a", 3: "d"}
