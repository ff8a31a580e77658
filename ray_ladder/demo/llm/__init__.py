"""The LLM story of `make demo`: chat clients streaming through an n-gram model ladder
while the top node is preempted mid-generation and comes back (docs/demo.md)."""
