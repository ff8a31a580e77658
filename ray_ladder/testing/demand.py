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


@contextmanager
def steady_demand(team: str, user: str, wants: Mapping[str, int],
                  every_s: float = 1.0) -> Iterator[None]:
    """Report ``wants`` for ``team``'s part ``user`` now and every ``every_s`` seconds
    while the block runs (the first report is in before the block starts); report no
    demand when it ends, even on an error. Needs a connected Ray driver.

    Example:
        >>> with steady_demand("a", "app-a", {"h100": 2}):  # doctest: +SKIP
        ...     wait_until(lambda: held("a") == 2, 60)
    """
    wants = dict(wants)
    stop = threading.Event()
    report_demand(team, user, wants)

    def again() -> None:
        while not stop.wait(every_s):
            report_demand(team, user, wants)

    thread = threading.Thread(target=again, name=f"demand-{team}-{user}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        report_demand(team, user, {})
