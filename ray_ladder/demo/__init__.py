"""The `make demo` stories on an embedded LocalCluster: chat streams through an LLM
ladder (``llm/``, the default) and a digit-serving ladder."""
