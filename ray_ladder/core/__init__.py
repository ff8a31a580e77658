"""Pure core: the ladder spec, constraints, the selector, placement arithmetic, events and
errors. Nothing in this folder imports Ray (tests/test_no_ray_import.py walks it)."""
