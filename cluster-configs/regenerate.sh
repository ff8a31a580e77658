#!/bin/sh
# Re-render every template from its ladder (run from the repository root).
# tests/autoscale/test_cluster_configs.py checks the files are what these commands write.
set -e
L=cluster-configs/ladders
ray-ladder render $L/llm.yaml --provider aws -o cluster-configs/aws.yaml
ray-ladder render $L/llm.yaml --provider gcp -o cluster-configs/gcp.yaml
ray-ladder render $L/llm.yaml --provider azure --accelerator l4=a10 -o cluster-configs/azure.yaml
ray-ladder render $L/hybrid-eu.yaml --provider gcp -o cluster-configs/hybrid-onprem-eu.yaml
ray-ladder render $L/llm.yaml --provider kuberay -o cluster-configs/kuberay.yaml
ray-ladder render $L/llm.yaml --provider local-fake --max-workers 1 -o cluster-configs/local-fake.yaml
ray-ladder render $L/llm.yaml --provider gke-computeclass -o cluster-configs/gke-computeclass.yaml
# Every way to buy capacity (examples/ladders/capacity.yaml): each provider's mechanism.
ray-ladder render $L/capacity.yaml --provider aws -o cluster-configs/capacity-aws.yaml
ray-ladder render $L/capacity.yaml --provider gcp -o cluster-configs/capacity-gcp.yaml
ray-ladder render $L/capacity.yaml --provider azure -o cluster-configs/capacity-azure.yaml
ray-ladder render $L/capacity.yaml --provider gke-computeclass -o cluster-configs/capacity-gke-computeclass.yaml
ray-ladder render $L/capacity.yaml --provider kuberay -o cluster-configs/capacity-kuberay-eks.yaml
ray-ladder render $L/capacity.yaml --provider kuberay --kube gke -o cluster-configs/capacity-kuberay-gke.yaml
ray-ladder render $L/capacity.yaml --provider kuberay --kube aks -o cluster-configs/capacity-kuberay-aks.yaml
# KubeRay as users run it: a RayService of the example Serve app, a RayJob of the batch example.
ray-ladder render examples/ladders/gpu-serving.yaml --provider kuberay --kind rayservice --serve-config examples/serve_config.yaml -o cluster-configs/kuberay-rayservice.yaml
ray-ladder render $L/llm.yaml --provider kuberay --kind rayjob --entrypoint "python /home/ray/app/examples/batch_embedding.py" -o cluster-configs/kuberay-rayjob.yaml
