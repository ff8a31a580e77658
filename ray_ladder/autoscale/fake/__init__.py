"""Ray's fake multi-node autoscaler, locally: a provider that refuses launches on a capacity
schedule, and a cluster that starts and stops only its own processes."""
