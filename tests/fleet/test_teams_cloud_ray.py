"""Cloud only when on-prem is full, on Ray's real autoscaler with the fake provider.

Two on-prem h100 units (static, on the head) are team a's quota; team b has none and a
cloud a100 rung (a fake autoscaler node type). b borrows both h100 units; a's demand
arrives, the arbiter sends b a notice, b's ladder falls and the hook asks for the cloud
rung, only then; a's demand goes, b is granted h100 again, its ladder climbs home and the
cloud node is given back (Ray's idle timeout). No task of b's is lost.
"""

from __future__ import annotations

import time

import pytest

from ray_ladder.autoscale.fake.teams import cloud_cluster, run_cloud_story

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def cluster():
    with cloud_cluster() as c:
        yield c


def _changes(samples: list[dict], since: float) -> list[tuple]:
    """The timeline where it changed: (seconds since ``since``, serving, asked, cloud
    nodes), for a failure to say what the hook and the autoscaler did."""
    out, last = [], None
    for s in samples:
        now = (s["serving"], s["asked"], s["cloud_nodes"])
        if now != last:
            out.append((round(s["time"] - since, 2), *now))
            last = now
    return out


def test_cloud_is_bought_only_while_on_prem_is_full_and_given_back(cluster) -> None:
    from ray_ladder.fleet import start_arbiter

    began = time.monotonic()
    run = run_cloud_story(cluster, start_arbiter)
    samples, reclaim_at, home_at, answers = run.samples, run.reclaim_at, run.home_at, run.answers
    launches = run.launches
    # the hook asked for the cloud rung only after a's reclaim, and never before it
    assert not any(s["asked"] or s["cloud_nodes"] for s in samples if s["time"] < reclaim_at)
    assert launches and all(e["time"] >= reclaim_at for e in launches)
    # once: the hook asked for the cloud rung one time (no ask after it let go) and never
    # held two cloud nodes; Ray's autoscaler may relaunch a node that did not join in time
    # on a starved machine (3 launches, one node, in a run at load average 18): its retry.
    asks = [False] + [s["asked"] for s in samples if s["time"] >= reclaim_at]
    rises = sum(1 for a, b in zip(asks, asks[1:], strict=False) if b and not a)
    timeline = (launches, _changes(samples, reclaim_at), home_at - reclaim_at)
    assert rises == 1, timeline
    assert max(s["cloud_nodes"] for s in samples) == 1, timeline
    # b's work moved to the cloud and came home; nothing was lost
    rungs = {rung for rung, _ in answers}
    assert {"h100", "a100-cloud"} <= rungs
    assert all(node == "a100" for rung, node in answers if rung == "a100-cloud")
    figures = run.figures()
    assert figures["cloud_node_s_while_onprem_free"] == 0.0
    assert figures["cloud_node_s"] > 0
    climb = next(s["time"] for s in samples if s["time"] > home_at and s["serving"] == "h100")
    print(f"\nteams cloud: {figures}; reclaim -> cloud serving "
          f"{next(s['time'] for s in samples if s['serving'] == 'a100-cloud') - reclaim_at:.1f} s"
          f", on-prem free -> climbed home {climb - home_at:.1f} s; module "
          f"{time.monotonic() - began:.1f} s; {len(answers)} tasks, 0 lost")
