"""`RoundTrip`: each part of a shared round trip is handed its own replies, errors among them."""

from __future__ import annotations

import pytest
import redis

from layers.plumbing.roundtrip import RoundTrip, raised
from layers.plumbing.steps import Batch


def test_each_part_is_handed_its_own_replies_whatever_comes_between() -> None:
    trip = RoundTrip(Batch())
    first = trip.part(list).get("a").get("b")
    trip.commands.get("the owner's")
    second = trip.part(lambda replies: sum(replies)).get("c")
    after = trip.after(lambda: (first.value, second.value))
    with pytest.raises(AttributeError, match="not known until"):
        _ = first.value
    trip.hand([1, 2, "mine", 3])
    assert (first.value, second.value, after.value) == ([1, 2], 3, ([1, 2], 3))


def test_a_part_that_raises_stops_the_parts_after_it(real_redis: redis.Redis, namespace: str) -> None:
    key = f"{namespace}:a list"
    real_redis.rpush(key, "x")
    trip = RoundTrip.on(real_redis)
    seen: list[str] = []
    trip.part(lambda replies: seen.append("before")).llen(key)
    failing = trip.part(raised).get(key)  # WRONGTYPE: the part's own reply
    trip.after(lambda: seen.append("after"))
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        trip.run()
    assert seen == ["before"] and len(failing.replies) == 1
    real_redis.delete(key)
