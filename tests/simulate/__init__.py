"""Tests of the trace-replay simulator and its baseline policies (pure core)."""
