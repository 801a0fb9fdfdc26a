"""Detection, take-out and recovery times computed from sampled gateway states."""

from __future__ import annotations

import pytest

from drill.scrape import DOWN, EJECTED, SUSPECT, UP
from drill.timeline import Sample, changes, max_gap, recovered_now, stable_after, timings

A, B = "127.0.0.1:1", "127.0.0.1:2"


def s(t: float, a: int = UP, b: int = UP, routable: int | None = 2) -> Sample:
    return Sample(t, {A: a, B: b}, routable)


def test_a_hang_is_seen_suspect_then_down_then_back() -> None:
    samples = [
        s(9.9),
        s(10.0),  # injected at 10.0
        s(10.5),
        s(10.6, a=SUSPECT),
        s(11.2, a=DOWN, routable=1),
        s(12.5, a=DOWN, routable=1),  # cleared at 12.5
        s(12.6, routable=2),
        s(13.0),
    ]
    t = timings(samples, [A], baseline=2, injected=10.0, cleared=12.5)
    assert t.detect_s == pytest.approx(0.6)
    assert t.takeout_s == pytest.approx(1.2)
    assert t.recover_s == pytest.approx(0.1)
    assert t.recovered


def test_a_state_before_the_injection_does_not_count() -> None:
    samples = [s(9.0, a=DOWN), s(10.0), s(10.2, a=DOWN), s(11.0)]
    t = timings(samples, [A], baseline=2, injected=10.0, cleared=10.5)
    assert t.detect_s == pytest.approx(0.2)


def test_other_sidecars_do_not_count_but_fewer_routable_replicas_do() -> None:
    # A non-zero rank is lost: its own state may lag, the group leaves routing at once.
    samples = [s(10.0), s(10.1, b=DOWN), s(10.3, routable=1), s(10.4, a=DOWN, routable=1)]
    t = timings(samples, [A], baseline=2, injected=10.0, cleared=11.0)
    assert t.detect_s == pytest.approx(0.3)
    assert t.takeout_s == pytest.approx(0.3)


def test_suspect_is_detected_but_not_taken_out() -> None:
    samples = [s(10.0), s(10.5, a=SUSPECT), s(11.0, a=SUSPECT), s(11.5)]
    t = timings(samples, [A], baseline=2, injected=10.0, cleared=11.2)
    assert t.detect_s == pytest.approx(0.5)
    assert t.takeout_s is None
    assert t.recover_s == pytest.approx(0.3)


def test_ejected_counts_as_taken_out() -> None:
    samples = [s(10.0), s(10.4, a=EJECTED), s(12.0)]
    t = timings(samples, [A], baseline=2, injected=10.0, cleared=11.0)
    assert t.takeout_s == pytest.approx(0.4)


def test_a_fault_never_seen_has_no_detection_and_no_recovery_time() -> None:
    samples = [s(10.0), s(11.0), s(12.0), s(13.0)]
    t = timings(samples, [A], baseline=2, injected=10.0, cleared=12.0)
    assert (t.detect_s, t.takeout_s, t.recover_s, t.recovered) == (None, None, None, True)


def test_recovery_is_the_start_of_the_last_healthy_run() -> None:
    samples = [
        s(10.0),
        s(11.0, a=DOWN, routable=1),
        s(12.1),  # cleared at 12.0: up ...
        s(12.2, a=SUSPECT),  # ... flaps ...
        s(12.6),  # ... and stays up from here
        s(13.0),
    ]
    t = timings(samples, [A], baseline=2, injected=10.0, cleared=12.0)
    assert t.recover_s == pytest.approx(0.6)
    assert t.recovered


def test_a_window_that_ends_down_has_not_recovered() -> None:
    samples = [s(10.0), s(11.0, a=DOWN, routable=1), s(12.5), s(13.0, a=DOWN, routable=1)]
    t = timings(samples, [A], baseline=2, injected=10.0, cleared=12.0)
    assert t.detect_s == pytest.approx(1.0)
    assert t.recover_s is None
    assert not t.recovered


def test_an_unknown_sidecar_or_routable_count_is_not_healthy() -> None:
    assert not recovered_now([Sample(1.0, {}, 2)], [A], 2)
    assert not recovered_now([Sample(1.0, {A: UP}, None)], [A], 2)
    assert not recovered_now([], [A], 2)
    assert recovered_now([s(1.0, a=DOWN), s(2.0)], [A], 2)


def test_samples_out_of_order_are_sorted() -> None:
    samples = [s(11.0, a=DOWN, routable=1), s(10.0), s(10.5, a=SUSPECT)]
    t = timings(samples, [A], baseline=2, injected=10.0, cleared=12.0)
    assert t.detect_s == pytest.approx(0.5)


def test_stable_after_needs_every_later_sample_to_match() -> None:
    samples = [s(1.0), s(2.0, a=DOWN), s(3.0)]
    assert stable_after(samples, 0.0, lambda x: x.states[A] == UP) == pytest.approx(3.0)
    assert stable_after(samples, 0.0, lambda x: False) == -1.0


def test_changes_keep_the_first_sample_and_each_change() -> None:
    samples = [
        s(10.0),
        s(10.1),
        s(10.6, a=SUSPECT),
        s(10.7, a=SUSPECT),
        s(11.2, a=DOWN, routable=1),
    ]
    assert changes(samples, [A], since=10.0) == [
        (0.0, [UP], 2),
        (0.6, [SUSPECT], 2),
        (1.2, [DOWN], 1),
    ]
    assert changes([Sample(1.0, {}, None)], [A, B], since=0.0) == [(1.0, [DOWN, DOWN], None)]
    assert changes([], [A], since=0.0) == []


def test_max_gap_counts_from_the_edges_of_the_span() -> None:
    samples = [s(9.0), s(10.1), s(10.2), s(11.5), s(11.6), s(20.0)]
    assert max_gap(samples, 10.0, 12.0) == pytest.approx(1.3)
    assert max_gap(samples, 10.0, 13.0) == pytest.approx(1.4)
    assert max_gap([], 10.0, 12.0) == pytest.approx(2.0)
