"""Clusters as rung locations and the ladder's data in the spec: tags from the cluster,
clear errors, data that binds every piece of work, and the data's move in the cost."""

from __future__ import annotations

import pytest

from ray_ladder import ConfigError, Constraints, Ladder
from ray_ladder.core.clusters import DataSpec, RungData, work_cost

BASE = """
name: train
clusters:
  onprem: {address: "http://10.0.0.1:8265", site: onprem, jurisdiction: eu}
  cloud: {address: "http://10.1.0.1:8265", site: cloud, jurisdiction: eu}
rungs:
  - {name: onprem-gpu, cluster: onprem, resources: {ladder/gpu: 1}, cost_per_hour: 2}
  - {name: cloud-gpu, cluster: cloud, resources: {ladder/gpu: 1}, cost_per_hour: 2,
     data: {region: cloud, transfer_gb_per_s: 0.025, egress_per_gb: 0.05}}
  - {name: shed, kind: shed}
"""


def test_a_rung_on_a_cluster_carries_its_site_and_jurisdiction():
    ladder = Ladder.from_yaml(BASE)
    assert ladder.rung("cloud-gpu").tags == {"site": "cloud", "jurisdiction": "eu"}
    assert Ladder.from_yaml(ladder.to_yaml()) == ladder


def test_residency_applies_to_clusters_as_to_rungs():
    ladder = Ladder.from_yaml(BASE)
    assert [r.name for r in ladder.eligible(Constraints(sites=("onprem",)))] == [
        "onprem-gpu", "shed"]


def test_an_unknown_cluster_names_the_field_and_the_known_ones():
    with pytest.raises(ConfigError) as err:
        Ladder.from_yaml(BASE.replace("cluster: cloud,", "cluster: clod,"))
    issue = err.value.issues[0]
    assert issue.path == "rungs.1.cluster" and "['cloud', 'onprem']" in issue.fix


@pytest.mark.parametrize("value", ["[cloud]", "{name: cloud}", "3"])
def test_a_cluster_that_is_not_a_name_is_a_config_error_naming_the_field(value):
    with pytest.raises(ConfigError) as err:  # found by the fuzz test: a list raised TypeError
        Ladder.from_yaml(BASE.replace("cluster: cloud,", f"cluster: {value},"))
    assert err.value.issues[0].path == "rungs[1] (cloud-gpu).cluster"


def test_a_tag_that_contradicts_its_cluster_is_an_error():
    with pytest.raises(ConfigError) as err:
        Ladder.from_yaml(BASE.replace("cluster: cloud,", "cluster: cloud, tags: {site: onprem},"))
    assert err.value.issues[0].path == "rungs.1.tags.site"


def test_a_cluster_address_must_be_http():
    with pytest.raises(ConfigError) as err:
        Ladder.from_yaml(BASE.replace('"http://10.1.0.1:8265"', '"10.1.0.1:8265"'))
    assert err.value.issues[0].path == "clusters.cloud.address"


def test_a_poll_interval_as_long_as_a_reading_is_trusted_is_an_error():
    with pytest.raises(ConfigError) as err:
        Ladder.from_yaml(BASE.replace("site: cloud, jurisdiction: eu}",
                                      "site: cloud, jurisdiction: eu, stale_after_s: 3, "
                                      "poll_interval_s: 3}"))
    issue = err.value.issues[0]
    assert issue.path == "clusters.cloud.poll_interval_s" and "below 3" in issue.fix


def test_data_that_stays_on_prem_excludes_the_cloud_rung_for_every_request():
    ladder = Ladder.from_yaml(BASE + "data: {stays: [onprem]}\n")
    assert [r.name for r in ladder.eligible()] == ["onprem-gpu", "shed"]
    assert [r.name for r in ladder.eligible(Constraints(sites=("cloud",)))] == ["shed"]


def test_the_cheaper_gpu_far_from_the_data_is_weighed_with_its_egress_and_link():
    ladder = Ladder.from_yaml(BASE + "data: {region: onprem, read_gb_per_hour: 180}\n")
    # 180 GB/h over a 0.025 GB/s (90 GB/h) link: half speed; 9/h egress; (2 + 9) / 0.5.
    assert ladder.work_cost_per_hour("cloud-gpu") == pytest.approx(22.0)
    assert ladder.work_cost_per_hour("onprem-gpu") == 2.0
    assert [r.name for r in ladder.eligible(Constraints(max_cost_per_hour=10))] == [
        "onprem-gpu", "shed"]


def test_work_cost_next_to_the_data_is_the_rungs_own():
    near = RungData(region="onprem", egress_per_gb=1.0)
    assert work_cost(3.0, near, DataSpec(region="onprem", read_gb_per_hour=10)).speed == 1.0
    assert work_cost(3.0, None, DataSpec(read_gb_per_hour=10)).cost_per_hour == 3.0
