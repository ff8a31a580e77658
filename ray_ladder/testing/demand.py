"""A part's demand held steady the way a running part reports it.

A team's part (a Serve app, a Tune run, a task ladder) reports its demand again every
control period while it runs; the arbiter drops a report older than
``grants.DEMAND_STALE_S`` (30 s). A test or bench that stands in for such a part with a
single ``report_demand`` loses its demand after 30 s, which a slow machine reaches (a CI
run's lender was never given its quota back, issue 46): :func:`steady_demand` reports it
again every ``every_s`` until its block ends, then withdraws it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from ray_ladder.cluster.grants import report_demand


class Demand:
    """The demand a :func:`steady_demand` block reports; :meth:`set` changes it."""

    def __init__(self, team: str, user: str, wants: Mapping[str, int]) -> None:
        self.team, self.user = team, user
        self.wants = dict(wants)
        self._lock = threading.Lock()

    def set(self, wants: Mapping[str, int]) -> None:
        """Report ``wants`` now, and from now on."""
        with self._lock:
            self.wants = dict(wants)
            report_demand(self.team, self.user, self.wants)

    def report(self) -> None:
        """Report the current demand again."""
        with self._lock:
            report_demand(self.team, self.user, self.wants)


@contextmanager
def steady_demand(team: str, user: str, wants: Mapping[str, int],
                  every_s: float = 1.0) -> Iterator[Demand]:
    """Report ``wants`` for ``team``'s part ``user`` now and every ``every_s`` seconds
    while the block runs (the first report is in before the block starts; the
    :class:`Demand` it gives changes it); report no demand when it ends, even on an
    error. Needs a connected Ray driver.

    Example:
        >>> with steady_demand("a", "app-a", {"h100": 1}) as demand:  # doctest: +SKIP
        ...     wait_until(lambda: held("a") == 1, 60)
        ...     demand.set({"h100": 2})  # a's second step
    """
    demand = Demand(team, user, wants)
    stop = threading.Event()
    demand.report()

    def again() -> None:
        while not stop.wait(every_s):
            demand.report()

    thread = threading.Thread(target=again, name=f"demand-{team}-{user}", daemon=True)
    thread.start()
    try:
        yield demand
    finally:
        stop.set()
        thread.join()
        demand.set({})
