# SPDX-License-Identifier: MIT
"""Options read as the C++ library reads them: durations in seconds rounded to the nearest
millisecond (1.005 s is the 1005 ms a C++ caller writes), times that must say their zone, an
empty batch id refused before anything is sent; and the Inspector's numbers as C++ StatsReader's
(tenants' backlog; a stream it may not read is an error, not a missing stream)."""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from streamq import ConfigError, Inspector, Producer, ReplyError, Retention
from streamq._wire import duration_ms, epoch_ms


def test_seconds_are_rounded_to_the_nearest_millisecond() -> None:
    assert duration_ms(1.005, "delay") == 1005
    assert duration_ms(2.675, "delay") == 2675
    assert duration_ms(timedelta(microseconds=1999), "delay") == 1  # as duration_cast: whole ms
    assert Retention(done=1.005, dead=0.001).field() == "1005 1"
    assert epoch_ms(1700000000.123, "run_at") == 1700000000123


def test_a_delay_is_written_in_rounded_milliseconds(server: str, stream: str, r: Any) -> None:
    with Producer(url=server, stream=stream) as p:
        p.enqueue("work", {}, delay=1.005, retention=Retention(done=1.005))
    fields = dict(zip(*[iter(r.eval("return cmsgpack.unpack(redis.call('ZRANGE', KEYS[1], 0, 0)[1])", 1,
                                    stream + ":delayed")[3:])] * 2))
    assert fields["retention"] == "1005 -1"


@pytest.mark.parametrize("option", ["run_at", "deadline"])
def test_a_naive_datetime_is_refused(server: str, stream: str, r: Any, option: str) -> None:
    with Producer(url=server, stream=stream) as p:
        with pytest.raises(ConfigError, match="time zone"):
            p.enqueue("work", {}, **{option: datetime.now() + timedelta(minutes=1)})
        p.enqueue("work", {}, **{option: datetime.now(timezone.utc) + timedelta(minutes=1)})
    assert r.xlen(stream) + r.zcard(stream + ":delayed") == 1


def test_an_empty_batch_id_is_refused(server: str, stream: str) -> None:
    with Producer(url=server, stream=stream) as p:
        with pytest.raises(ConfigError, match="batch_id must not be empty"):
            p.close_batch("")


def test_stats_count_the_tenants_backlog(server: str, stream: str) -> None:
    with Producer(url=server, stream=stream) as p:
        for tenant in ("acme", "acme", "beta"):
            p.enqueue("work", {}, tenant=tenant)
        p.enqueue("work", {}, tenant="acme", priority="high")
        p.enqueue("work", {})
    stats = Inspector(url=server, stream=stream).stats()
    assert (stats.backlog, stats.backlog_tenants, stats.length) == (4, 2, 1)


def test_stats_of_a_stream_it_may_not_read_is_an_error(server: str, stream: str, r: Any) -> None:
    user, password = "py-noxinfo-" + uuid.uuid4().hex[:8], uuid.uuid4().hex
    r.execute_command("ACL", "SETUSER", user, "on", ">" + password, "~*", "&*", "+@all", "-xinfo")
    try:
        with Producer(url=server, stream=stream) as p:
            p.enqueue("work", {})
        url = server.replace("redis://", f"redis://{user}:{password}@")
        with pytest.raises(ReplyError) as refused:
            Inspector(url=url, stream=stream).stats()
        assert refused.value.prefix == "NOPERM"
    finally:
        r.execute_command("ACL", "DELUSER", user)
