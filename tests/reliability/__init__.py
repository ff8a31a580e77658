"""Reliability: faults of the ladder's own parts, and the chaos soak."""
