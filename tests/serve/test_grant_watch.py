"""The router's grants watch: between probes it reads its team's entry and wakes the
probe early only when what the team's work acts on changed (pure: a fake entry source)."""

from __future__ import annotations

import asyncio
import time

from ray_ladder.serve.probe import GrantWatch

OK = {"team": "b", "time": 1.0, "budget": "ok", "budget_until": None,
      "rungs": {"h100": {"held": 2, "noticed": 0, "deadline": None, "wanted": 2}}}


def _run(entries, due_s: float, every_s: float = 0.01):
    """Sleep with a watch whose reads return ``entries`` one after another (the last one
    repeats); returns (woken early, seconds slept)."""
    feed = list(entries)

    def read():
        return feed.pop(0) if len(feed) > 1 else feed[0]

    async def main():
        watch = GrantWatch(read, every_s)
        loop = asyncio.get_running_loop()
        start = time.monotonic()
        early = await watch.sleep_until(loop.time() + due_s)
        return early, time.monotonic() - start

    return asyncio.run(main())


def test_a_spent_budget_wakes_the_probe_within_a_read():
    early, slept = _run([OK, OK, {**OK, "budget": "demote", "budget_until": 90.0}], 5.0)
    assert early and slept < 1.0


def test_a_reclaim_notice_wakes_the_probe():
    noticed = {**OK, "rungs": {"h100": {"held": 2, "noticed": 1, "deadline": 9.0}}}
    assert _run([OK, noticed], 5.0)[0]


def test_a_new_round_with_the_same_grants_does_not_wake_it():
    rounds = [{**OK, "time": float(i), "rungs": {"h100": {**OK["rungs"]["h100"],
                                                           "wanted": i}}} for i in range(50)]
    early, slept = _run(rounds, 0.3)
    assert not early and slept >= 0.3


def test_the_first_read_only_sets_what_was_seen_and_failed_reads_are_skipped():
    calls = []

    def read():
        calls.append(1)
        if len(calls) == 2:
            raise ConnectionError("the KV is unreachable")
        return OK

    async def main():
        loop = asyncio.get_running_loop()
        return await GrantWatch(read, 0.01).sleep_until(loop.time() + 0.2)

    assert asyncio.run(main()) is False and len(calls) >= 3
