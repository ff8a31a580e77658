"""Cluster templates from a ladder: ``ray up`` YAMLs (AWS, GCP, Azure, local fake), KubeRay
and GKE ComputeClass manifests, and the machine catalog they draw from."""
