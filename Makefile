# The two commands: `make demo` and `make test`. Both create .venv when it is missing.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test test-tools lint bench clean

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

# pytest exits 5 when it collects no test: that is a failure of the suite, say so.
# One process by default: two Ray clusters at once on two cores interfere (GCS deadlines,
# timing goals); TEST_WORKERS=2 runs two pytest-xdist workers, a module at a time each.
TEST_WORKERS ?= 0
test: $(VENV)/.test-installed test-tools
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

lint: $(VENV)/.test-installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy ray_ladder

bench: $(VENV)/.test-installed
	for b in bench/*.py; do echo "== $$b"; $(PY) $$b; done

clean:
	rm -rf $(VENV) demo-out sim-out .pytest_cache
