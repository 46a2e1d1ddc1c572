"""Streams (default + pools of 32 low / 32 high priority per device) and events."""

from __future__ import annotations

import pytest
import torch


def sp():  # type: ignore[no-untyped-def]
    return torch.spyre  # type: ignore[attr-defined]


def test_default_and_current_stream(spyre: None) -> None:
    cur = sp().current_stream()
    assert cur.stream_id == 0 and cur.device.type == "spyre"
    assert sp().default_stream(1).device_index == 1


def test_priority_pools(spyre: None) -> None:
    high = [sp().Stream(priority=-1) for _ in range(40)]
    low = sp().Stream(priority=0)
    assert all(s.priority == -1 for s in high)
    assert low.priority == 0
    # the high-priority pool has 32 streams per device and is reused round-robin
    assert len({s.stream_id for s in high}) == 32
    assert low.stream_id not in {s.stream_id for s in high}


def test_stream_context_sets_and_restores(spyre: None) -> None:
    s = sp().Stream()
    with sp().stream(s):
        assert sp().current_stream().stream_id == s.stream_id
        y = torch.ones(4, dtype=torch.float16, device="spyre") * 3
    assert sp().current_stream().stream_id == 0
    assert torch.equal(y.cpu(), torch.full((4,), 3.0, dtype=torch.float16))


def test_streams_are_per_device(spyre: None) -> None:
    s1 = sp().Stream(device="spyre:1")
    assert s1.device_index == 1
    with sp().stream(s1):
        assert sp().current_stream(1).stream_id == s1.stream_id
        assert sp().current_stream(0).stream_id == 0


def test_event_record_wait_query_synchronize_elapsed(spyre: None) -> None:
    start = sp().Event(enable_timing=True)
    end = sp().Event(enable_timing=True)
    s = sp().Stream()
    start.record(s)
    x = torch.randn(256, 256, dtype=torch.float16).to("spyre")
    (x @ x).sum()
    end.record(s)
    sp().current_stream().wait_event(end)
    end.synchronize()
    assert start.query() and end.query()
    elapsed = start.elapsed_time(end)
    assert elapsed >= 0.0
    s.synchronize()
    sp().synchronize()


def test_stream_record_event_and_wait_stream(spyre: None) -> None:
    a, b = sp().Stream(), sp().Stream(device="spyre:0")
    ev = a.record_event(sp().Event(enable_timing=True))
    assert isinstance(ev, torch.Event) and ev.device == a.device
    b.wait_stream(a)
    after = b.record_event(sp().Event(enable_timing=True))
    # both really recorded (elapsed_time refuses an unrecorded event), in that order
    assert ev.elapsed_time(after) >= 0.0
    # query and synchronize go through the runtime's device guard (torch's own methods: a
    # backend without queryStream/synchronizeStream raises here); eager execution: complete
    assert type(a).query is torch.Stream.query and type(a).synchronize is torch.Stream.synchronize
    assert a.query() and b.query()
    b.synchronize()


def test_elapsed_time_needs_recorded_events(spyre: None) -> None:
    e1, e2 = sp().Event(enable_timing=True), sp().Event(enable_timing=True)
    e1.record()
    with pytest.raises(ValueError, match="must be recorded"):
        e1.elapsed_time(e2)


def test_synchronize_rejects_a_missing_card(spyre: None) -> None:
    with pytest.raises(ValueError, match="invalid spyre device"):
        sp().synchronize(99)
