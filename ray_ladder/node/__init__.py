"""What one machine advertises: accelerator detection (pynvml/gpustat behind the NVML seam)
and the Ray resources and labels it implies."""
