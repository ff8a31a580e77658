"""How the Serve policy and the capacity view follow the hook's roles (no Ray cluster)."""

from __future__ import annotations

from types import SimpleNamespace

from ray_ladder import Constraints, Ladder, Selector
from ray_ladder.cluster import roles
from ray_ladder.cluster.capacity import CapacityView
from ray_ladder.testing import FakeNodes

LADDER = Ladder.from_yaml("""
name: follow
rungs:
  - {name: h100, resources: {ladder/h100: 1}, tags: {jurisdiction: us}}
  - {name: a100, resources: {ladder/a100: 1}, quality: 0.9, tags: {jurisdiction: eu}}
  - {name: l4, resources: {ladder/l4: 1}, quality: 0.7, tags: {jurisdiction: eu}}
  - {name: shed, kind: shed, quality: 0}
""")
NOW = 1_000.0


def _nodes(*rungs: str, dead: tuple[str, ...] = ()) -> FakeNodes:
    """One node per rung, its id the rung's name; those in ``dead`` killed."""
    nodes = FakeNodes(LADDER)
    for rung in rungs:
        nodes.add(rung, node_id=rung)
    for rung in dead:
        nodes.kill(rung)
    return nodes


def _roles(time: float = NOW, stopped: bool = False, **by_rung: str) -> dict:
    state = {"ladder": "follow", "version": 7, "time": time, "interval_s": 0.5,
             "stopped": stopped, "serving": "h100",
             "rungs": {n: {"role": r, "status": "up", "nodes": 1, "failures": 0}
                       for n, r in by_rung.items()},
             "events": [{"kind": "transition"}] * 50}
    return roles.summarize(state)


def _view(nodes: FakeNodes, published: dict | None, **kw) -> CapacityView:
    return CapacityView(LADDER, node_source=nodes, hook_source=lambda name: published,
                        wall_clock=lambda: NOW, **kw)


# --- the capacity view ---------------------------------------------------------------------


def test_a_released_rung_takes_no_new_work_while_a_better_one_is_obtainable():
    nodes = _nodes("h100", "a100")
    snap = _view(nodes, _roles(h100="serving", a100="released")).refresh()
    assert snap.obtainable["h100"] and not snap.obtainable["a100"]
    assert snap.rungs["a100"].obtainable  # the node can still host it: only held back
    assert snap.held == {"a100": roles.RELEASED_REASON} and snap.why("a100") == snap.held["a100"]
    assert Selector(LADDER).observe(snap.obtainable, now=0).rung == "h100"
    # draining keeps in-flight and new work until released; warming is a better rung.
    snap = _view(nodes, _roles(h100="warming", a100="draining")).refresh()
    assert snap.obtainable["a100"] and snap.held == {}


def test_a_released_rung_stays_when_nothing_better_is_obtainable():
    # The better node died since the hook's last step, or this consumer cannot use it.
    published = _roles(h100="serving", a100="released", l4="released")
    snap = _view(_nodes("h100", "a100", "l4", dead=("h100",)), published).refresh()
    assert snap.obtainable["a100"] and not snap.obtainable["l4"]
    eu = _view(_nodes("h100", "a100"), published,
               constraints=Constraints(jurisdiction="eu")).refresh()
    assert eu.obtainable["a100"] and eu.held == {}
    # A consumer whose better rung cannot take work yet (its replica is still starting).
    warm = {"h100": False}
    view = _view(_nodes("h100", "a100"), published, ready=lambda r: warm.get(r, True))
    assert view.refresh().obtainable["a100"]
    warm["h100"] = True
    assert not view.refresh().obtainable["a100"]


def test_no_hook_a_stopped_one_or_a_stale_one_changes_nothing():
    nodes = _nodes("h100", "a100")
    for published in (None, _roles(stopped=True, a100="released"),
                      _roles(time=NOW - 31, a100="released")):
        snap = _view(nodes, published).refresh()
        assert snap.obtainable["a100"] and snap.held == {}
    off = _view(nodes, _roles(a100="released"), follow_hook=False)
    assert off.refresh().obtainable["a100"]


def test_hook_entries_are_read_no_more_often_than_the_hook_publishes():
    reads: list[str] = []
    now = [0.0]
    published: dict[str, dict | None] = {"follow": None}

    def read(name: str) -> dict | None:
        reads.append(name)
        return published[name]

    reader = roles.HookRoles(recheck_s=5.0, read=read, clock=lambda: now[0])
    view = CapacityView(LADDER, node_source=_nodes("h100", "a100"),
                        hook_source=reader.get, wall_clock=lambda: NOW)
    for t in (0.0, 1.0, 4.9):
        now[0] = t
        view.refresh()
    assert len(reads) == 1
    published["follow"] = _roles(h100="serving", a100="released")  # interval_s 0.5
    now[0] = 5.0
    assert not view.refresh().obtainable["a100"]
    now[0] = 5.3  # the hook has not stepped again since: no read
    view.refresh()
    assert len(reads) == 2
    now[0] = 5.5
    view.refresh()
    assert len(reads) == 3


def test_summary_is_small_and_keeps_what_consumers_need():
    entry = _roles(h100="serving", a100="released")
    assert set(entry) == {"ladder", "version", "time", "interval_s", "stopped", "serving",
                          "rungs"}
    assert entry["rungs"]["a100"] == {"role": "released", "status": "up"}
    assert roles.released_rungs(entry, NOW) == ["a100"]
    assert roles.read_roles("follow") is None  # no Ray here: no hook, no error


# --- the Serve policy ----------------------------------------------------------------------


def test_policy_constants_match_the_hook_publisher():
    from ray_ladder.serve import scaling

    assert (scaling.HOOK_KV_NAMESPACE, scaling.HOOK_ROLES_PREFIX) == (
        roles.KV_NAMESPACE, roles.ROLES_PREFIX)
    assert (scaling.HOOK_STALE_STEPS, scaling.HOOK_STALE_MIN_S) == (
        roles.STALE_STEPS, roles.STALE_MIN_S)
    assert (scaling.SPILL_PREFIX, scaling.SPILL_FRESH_S) == (
        roles.SPILL_PREFIX, roles.SPILL_FRESH_S)


class _Policy:
    """A StandbyPolicy whose KV read returns what the test publishes, counting reads."""

    def __init__(self, standby: int, rung: str = "a100") -> None:
        from ray_ladder.serve.scaling import StandbyPolicy

        self.published: dict | None = None
        self.reads = 0
        self.policy = StandbyPolicy(standby=standby, ladder="follow", rung=rung)

        def read() -> dict | None:
            self.reads += 1
            return self.published

        self.policy._read_roles = read  # type: ignore[method-assign]

    def __call__(self, t: float, *, running: int = 0, target: int = 0,
                 requests: float = 0.0) -> float:
        from ray.serve.config import AutoscalingConfig

        config = AutoscalingConfig(min_replicas=0, max_replicas=4, downscale_delay_s=60.0)
        ctx = SimpleNamespace(current_num_replicas=running, target_num_replicas=target,
                              total_num_requests=requests, policy_state={}, config=config,
                              current_time=NOW + t)
        return self.policy(ctx)[0]


def _published(role: str, status: str = "up") -> dict:
    entry = _roles(a100=role)
    entry["rungs"]["a100"]["status"] = status
    return entry


def test_policy_without_a_hook_is_serves_policy_floored_at_standby():
    p = _Policy(standby=1)
    assert p(0) == 1
    assert p(1, running=1, target=1, requests=6) == 3  # traffic scales up (target 2 each)
    idle = _Policy(standby=0)
    # 1 -> 0 waits downscale_delay_s (60 s) with no request, as Serve does.
    assert [idle(t, running=1, target=1) for t in (0, 30, 59.9, 60)] == [1, 1, 1, 0]
    assert idle(61) == 0


def test_policy_cuts_released_draining_and_stocked_out_rungs_to_zero_at_once():
    for role, status in (("released", "up"), ("draining", "up"), ("none", "stocked_out")):
        p = _Policy(standby=1)
        p.published = _published(role, status)
        assert p(0, running=1, target=1) == 0, role
        assert p(0.1, running=0, target=1) == 0, "a pending replica is dropped too"
        assert p(0.2, running=1, target=1, requests=1.0) > 0, "traffic still scales it"


def test_policy_warms_a_rung_the_hook_says_is_warming():
    p = _Policy(standby=0)
    assert p(0) == 0
    p.published = _published("warming")
    assert p(1.0) == 1
    p.published = _published("serving")
    assert p(2.0, running=1, target=1) == 1  # back to standby 0: Serve's delay holds it


def test_policy_reads_the_kv_at_most_once_a_second_and_ignores_a_stale_hook():
    p = _Policy(standby=1)
    p.published = _published("released")
    for t in (0.0, 0.3, 0.9):
        assert p(t) == 0
    assert p.reads == 1
    p.published = _published("serving")
    assert p(1.0) == 1 and p.reads == 2
    p.published = _published("released")
    p.published["time"] = NOW - 100  # a hook killed without stop: today's behaviour
    assert p(2.0) == 1
    p.published = {**_published("released"), "stopped": True}
    assert p(3.0) == 1


# --- the task ladder's native path ---------------------------------------------------------


def test_native_path_keeps_rays_fallback_off_a_released_rung():
    from ray_ladder.task.native import NativePath
    from ray_ladder.task.options import TaskOptions, TaskSpec

    ladder = Ladder.from_yaml("""
    name: follow
    rungs:
      - {name: h100, num_cpus: 1, label_selector: {gpu: h100}}
      - {name: a100, num_cpus: 1, label_selector: {gpu: a100}}
      - {name: l4, num_cpus: 1, label_selector: {gpu: l4}}
    """)

    def embed(x, *, rung):
        return x

    path = NativePath(TaskSpec("embed", "fam", embed, ladder,
                               TaskOptions.build({"path": "native"}, ladder=ladder)))
    sent: list[dict] = []

    class Remote:  # records the Ray options a call would be submitted with
        def __init__(self, options: dict) -> None:
            self.options = options

        def remote(self, *args, **kwargs):
            sent.append(self.options)
            ref = SimpleNamespace(binary=lambda: str(len(sent)).encode())
            return ref, ref

    path._runner = SimpleNamespace(options=lambda **kw: Remote(kw))
    path._held = None
    path._build_remotes(frozenset())
    published = [None]
    nodes = FakeNodes()
    for g in ("h100", "a100"):
        nodes.add({"CPU": 1.0}, node_id=g, labels={"gpu": g})
    path.view = CapacityView(ladder, node_source=nodes, hook_source=lambda n: published[0],
                             wall_clock=lambda: NOW, refresh_interval_s=0.0)
    path.submit((1,), {})
    assert sent[-1]["label_selector"] == {"gpu": "h100"}
    assert [f["label_selector"]["gpu"] for f in sent[-1]["fallback_strategy"]] == ["a100", "l4"]
    published[0] = _roles(h100="serving", a100="released")
    path.submit((2,), {})
    assert [f["label_selector"]["gpu"] for f in sent[-1]["fallback_strategy"]] == ["l4"]


def test_orchestrator_node_cache_reads_roles_in_its_background_refresh():
    from ray_ladder.task.orchestrator.nodes import NodeCache

    reads: list[str] = []
    cache = NodeCache(node_source=_nodes("h100"))
    cache._hook = roles.HookRoles(read=lambda name: reads.append(name) or _roles(a100="released"))
    cache.follow("follow")
    assert cache.hook_roles("follow") is None  # nothing read until the next refresh
    cache.refresh()
    assert reads == ["follow"] and roles.released_rungs(cache.hook_roles("follow"), NOW) == [
        "a100"]


def test_the_hook_sums_the_fresh_spill_of_its_own_ladders_apps_only():
    from ray_ladder.autoscale.sources import spill_wanted

    entries = [{"time": 99.0, "ladder": "gpu", "rungs": {"h100": 2, "a100": 0}},
               {"time": 98.0, "ladder": "gpu", "rungs": {"h100": 1, "a100": True}},
               {"time": 60.0, "ladder": "gpu", "rungs": {"h100": 9}},     # stale
               {"time": 99.0, "rungs": {"h100": 9}},                     # no ladder named
               {"time": "x", "ladder": "gpu", "rungs": {"h100": 9}},      # not a time
               {"time": 99.0, "ladder": "gpu", "rungs": ["h100"]}]        # not a mapping
    assert spill_wanted(entries, "gpu", now=100.0) == {"h100": 3}
    assert spill_wanted(entries, "other", now=100.0) == {}
