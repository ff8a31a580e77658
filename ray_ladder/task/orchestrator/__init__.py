"""The per-driver orchestrator actor of the task ladder: calls, lanes, per-task state, the
node cache and the handle registry (dependencies point one way: registry -> actor -> state
-> lanes -> calls)."""
