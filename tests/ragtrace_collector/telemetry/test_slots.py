"""Label slots by recent frequency: distinct seconds counted in fixed memory, one-shot values give way."""

from __future__ import annotations

from ragtrace_collector.telemetry.slots import EVICTION_SAMPLE, FrequencySketch, Reclaim, Slots

T0 = 1000.0


def test_sketch_counts_distinct_seconds_not_observations():
    sketch = FrequencySketch(window_seconds=60)
    assert [sketch.add("checkout", T0 + 0.1 * i) for i in range(5)] == [1] * 5  # a burst is one second
    assert sketch.add("checkout", T0 + 1) == 2
    assert sketch.add("checkout", T0 + 2.5) == 3
    assert sketch.add("other-name", T0 + 2.5) == 1


def test_sketch_remembers_one_to_two_windows():
    sketch = FrequencySketch(window_seconds=60)
    for s in range(3):
        sketch.add("checkout", T0 + 59 + s)  # across a window boundary: nothing lost
    assert sketch.add("checkout", T0 + 62) == 4
    assert sketch.add("checkout", T0 + 62 + 120) == 1  # two windows later it starts over


def test_sketch_memory_is_fixed_under_a_flood():
    sketch = FrequencySketch(window_seconds=60, width=1024)
    sizes = (len(sketch._current), len(sketch._previous), len(sketch._stamps))
    over = sum(sketch.add(f"junk-{i}", T0 + i // 10) >= 3 for i in range(20_000))  # 10 new names a second
    assert (len(sketch._current), len(sketch._previous), len(sketch._stamps)) == sizes
    assert over < 200  # a one-shot name rarely looks recurring (< 1 %)


def held(slots: Slots[str], *names: str, at: float = T0) -> None:
    for name in names:
        slots.add(name, at)


def test_a_recurring_value_takes_the_least_recently_used_one_shot_slot():
    slots: Slots[str] = Slots(600, Reclaim(hits=3))
    held(slots, "junk-a", "junk-b", "junk-c")
    assert slots.victim(2, T0 + 3) is None  # below the threshold
    assert slots.victim(3, T0 + 3) == "junk-a"
    assert slots.victim(3, T0 + 3, keep="junk-a") == "junk-b"


def test_a_value_seen_as_often_keeps_its_slot():
    slots: Slots[str] = Slots(600, Reclaim(hits=3))
    held(slots, "steady")
    for s in range(1, 5):
        slots.touch("steady", T0 + s)  # seen in 5 seconds
    assert slots.victim(5, T0 + 5) is None  # ties keep the holder: no flapping between equals
    assert slots.victim(6, T0 + 5) == "steady"


def test_held_counts_decay_with_the_windows():
    slots: Slots[str] = Slots(10_000, Reclaim(hits=3, window_seconds=60))
    held(slots, "steady", at=T0 + 1)
    for s in range(2, 10):
        slots.touch("steady", T0 + s)
    assert slots.victim(9, T0 + 10) is None
    assert slots.victim(3, T0 + 200) == "steady"  # not seen for two windows: as good as one-shot


def test_only_the_least_recently_used_are_looked_at():
    slots: Slots[str] = Slots(600, Reclaim(hits=3))
    for i in range(EVICTION_SAMPLE):
        slots.add(f"busy-{i}", T0, hits=50)
    slots.add("junk", T0)  # a one-shot, but the most recently used
    assert slots.victim(3, T0 + 1) is None
    slots.touch("busy-0", T0 + 1)  # "junk" is now among the least recently used
    assert slots.victim(3, T0 + 1) == "junk"


def test_reclaim_off_is_first_come_first_served():
    slots: Slots[str] = Slots(600, Reclaim(hits=0))
    held(slots, "junk")
    assert slots.turned_away("checkout", T0) == 0
    assert slots.victim(100, T0) is None


def test_idle_slots_expire_least_recent_first():
    slots: Slots[str] = Slots(600, Reclaim())
    held(slots, "a", "b")
    slots.touch("a", T0 + 100)
    assert slots.expire(T0 + 650) == ["b"]
    assert "a" in slots and len(slots) == 1
    assert slots.fresh("a", T0 + 100.5) and not slots.fresh("a", T0 + 101)
