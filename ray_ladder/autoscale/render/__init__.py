"""Cluster templates from a ladder: ``ray up`` YAMLs (AWS, GCP, Azure, local fake), KubeRay
and GKE ComputeClass manifests, and the machine catalog they draw from."""

from __future__ import annotations

from ray_ladder.autoscale.render.api import dumps_json, render, render_yaml
from ray_ladder.autoscale.render.ray_up import PROVIDERS, RenderOptions

__all__ = ["PROVIDERS", "RenderOptions", "dumps_json", "render", "render_yaml"]
