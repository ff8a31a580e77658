# The two commands: `make demo` and `make test`. Both create .venv when it is missing.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test test-tools engine lint bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# The extras each target needs (pyproject.toml names them for what they bring).
DEMO_EXTRAS := demo,serve,llm,plots
TEST_EXTRAS := test,demo,serve,llm,tune,train,plots,gpu,jobs

$(VENV)/.demo-installed: $(PY) pyproject.toml
	$(PY) -m pip install --quiet -e '.[$(DEMO_EXTRAS)]'
	touch $@

$(VENV)/.test-installed: $(PY) pyproject.toml
	$(PY) -m pip install --quiet -e '.[$(TEST_EXTRAS)]'
	touch $@

# The real engine (vLLM: the CPU build here, the CUDA one where nvidia-smi answers) and
# what Ray Serve LLM needs beside it; docs/install.md says what it costs.
$(VENV)/.engine-installed: $(VENV)/.test-installed ray_ladder/engines/install.py
	$(PY) -m ray_ladder.engines.install
	touch $@

engine: $(VENV)/.engine-installed

demo: $(VENV)/.demo-installed
	$(PY) -m ray_ladder.demo

# The Prometheus integration test (tests/operating) runs the real server: Debian's package,
# installed here when we are root and it is missing; elsewhere that test says why it skips.
test-tools:
	@if ! command -v prometheus >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y prometheus \
	      || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y prometheus) \
	      || echo "could not install prometheus: its integration test will skip" >&2; \
	  else \
	    echo "prometheus missing (as root: apt-get install -y prometheus): its test will skip" >&2; \
	  fi; \
	fi

# Two passes. First the `alone` modules, one process, nothing of the suite beside them:
# they measure latency goals (only the modules that use the marker are collected for it:
# collecting the whole suite again costs seconds). Then every other test, with two
# pytest-xdist workers when the machine is quiet (tests/workers.py measures it: two Ray
# clusters at once beside another Ray workload miss Ray's own start deadlines), a whole
# module per worker at a time. The big pass runs last so that its summary (the failures,
# `-ra`) is the end of the output, where a CI log's tail shows it; a closing line gives
# both passes' exit codes. pytest exits 5 when it collects no test: a failure of the
# suite, say so.
TEST_WORKERS ?=
test: $(VENV)/.test-installed $(VENV)/.engine-installed test-tools
	$(VENV)/bin/ruff check .
	@w="$(TEST_WORKERS)"; [ -n "$$w" ] || w=$$($(PY) tests/workers.py || echo 0); \
	echo "the 'alone' modules in one process, then pytest workers: $$w (0: one process)"; \
	$(PY) -m pytest -n 0 -m alone $$(grep -rl --include='test_*.py' 'mark.alone' tests); rc2=$$?; \
	$(PY) -m pytest -n $$w --dist loadfile -m "not alone"; rc=$$?; \
	echo "make test: the 'alone' pass exited $$rc2, the main pass $$rc (0: passed)"; \
	if [ $$rc2 -eq 5 ]; then echo "pytest collected no 'alone' tests" >&2; exit 1; fi; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; \
	if [ $$rc -ne 0 ]; then exit $$rc; fi; exit $$rc2

lint: $(VENV)/.test-installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy ray_ladder

bench: $(VENV)/.test-installed
	for b in bench/*.py; do echo "== $$b"; $(PY) $$b; done

clean:
	rm -rf $(VENV) demo-out sim-out .pytest_cache
