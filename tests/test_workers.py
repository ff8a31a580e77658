"""`make test`'s worker count: two only where two cores are there and mostly idle."""

from __future__ import annotations

import pytest

from tests.workers import MAX_BUSY_PERCENT, workers


@pytest.mark.parametrize(("cores", "busy", "expected"), [
    (2, 5.0, 2), (16, MAX_BUSY_PERCENT, 2),  # quiet: two workers
    (2, MAX_BUSY_PERCENT + 1, 0), (2, 100.0, 0),  # another workload holds the CPUs
    (1, 0.0, 0), (None, 0.0, 0),  # one core, or unknown
])
def test_two_workers_only_on_two_quiet_cores(cores, busy, expected):
    assert workers(cores, busy) == expected
