"""The Redis breaker's log: one warning when an outage starts, a reminder a minute, one line when it ends.

Every Redis user of a receiver (queue, assembly state, pairing, budget) retries a dead Redis each
``retry_interval``; a warning per retry would be two lines a second per component for the whole outage.
"""

from __future__ import annotations

import logging

import pytest

from ragtrace_collector.internal.redis import Breaker
from tests.support.assembly import ManualClock

LOGGER = "ragtrace_collector.internal.redis"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def retry_for(breaker: Breaker, clock: ManualClock, seconds: float, step: float = 0.5) -> None:
    """A caller failing each time the breaker lets it try again, for ``seconds``."""
    end = clock.t + seconds
    while clock.t < end:
        if breaker.available():
            breaker.failed(ConnectionError("Connection refused"))
        clock.t += step


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_an_outage_is_one_warning_not_one_per_retry(clock, caplog):
    breaker = Breaker("redis queue", "buffering records locally", retry_interval=0.5, clock=clock)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        retry_for(breaker, clock, 50)
    assert len(lines(caplog)) == 1
    assert lines(caplog)[0] == "redis queue unreachable (Connection refused); buffering records locally"
    assert caplog.records[0].levelno == logging.WARNING


def test_a_long_outage_is_recalled_each_minute_and_its_end_reported(clock, caplog):
    breaker = Breaker("redis queue", "buffering records locally", retry_interval=0.5, clock=clock)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        retry_for(breaker, clock, 150)
        breaker.recovered()
        breaker.recovered()  # no outage any more: nothing to say
    said = lines(caplog)
    assert said[1:3] == [
        "redis queue still unreachable after 60 s (Connection refused); buffering records locally",
        "redis queue still unreachable after 120 s (Connection refused); buffering records locally",
    ]
    assert said[3] == "redis queue reachable again after 150 s"
    assert len(said) == 4


def test_failures_after_a_quiet_spell_are_a_new_outage(clock, caplog):
    """Callers that never report success (the assembly state, the budget): a failure long after the last one
    starts a new outage, with its own warning and its own clock."""
    breaker = Breaker("shared judge budget", "using a local share", retry_interval=0.5, clock=clock)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        retry_for(breaker, clock, 10)
        clock.t += 300  # Redis answered all this while
        retry_for(breaker, clock, 70)
    said = lines(caplog)
    assert said == [
        "shared judge budget unreachable (Connection refused); using a local share",
        "shared judge budget unreachable (Connection refused); using a local share",
        "shared judge budget still unreachable after 60 s (Connection refused); using a local share",
    ]


def test_the_breaker_still_skips_a_dead_redis_between_retries(clock):
    breaker = Breaker("redis queue", "buffering records locally", retry_interval=0.5, clock=clock)
    assert breaker.available()
    breaker.failed(ConnectionError("refused"))
    assert not breaker.available()
    clock.t += 0.5
    assert breaker.available()
    breaker.recovered()
    assert breaker.available()
