"""Real inference engines for the ladder's own tests, benches and demo: the pinned vLLM
install (:mod:`.install`), tiny models made here (:mod:`.tiny`) and a vLLM OpenAI server
as a process (:mod:`.server`). Nothing here imports Ray or the engine at import time."""
