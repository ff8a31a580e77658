"""The `make demo` story: a digit-serving ladder on an embedded LocalCluster."""
