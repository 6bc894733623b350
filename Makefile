# aifab: `make demo` runs the quickstart, `make test` the whole suite, `make check` every gate.
# Each target creates .venv if missing and installs torch==2.13.0 (CPU build) FIRST: anything
# that pulls torch before it would download a multi-GB CUDA build.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.aifab-installed
PYTEST_ARGS ?= -n 2 --dist loadfile

.PHONY: install browser promtool demo test check lint bench-data bench-ingest bench-tracking clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[all,dev]'
	touch $(STAMP)

# The dashboard's browser tests drive Debian's chromium (Playwright's own download does not work
# offline). Installed when missing and we may (root); otherwise those tests skip, naming why.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's chromium for the dashboard's browser tests"; \
	    apt-get install -y -q chromium >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; } || \
	    echo "warning: could not install chromium: the browser tests will skip"; \
	  else echo "warning: no chromium (apt-get install chromium): the browser tests will skip"; fi; }

# The exported alert rules are unit-tested with promtool (Debian's prometheus package).
promtool:
	@command -v promtool >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's prometheus (promtool) for the alert-rule tests"; \
	    apt-get install -y -q prometheus >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null && apt-get install -y -q prometheus >/dev/null; } || \
	    echo "warning: could not install prometheus: the promtool tests will skip"; \
	  else echo "warning: no promtool (apt-get install prometheus): the promtool tests will skip"; fi; }

install: $(STAMP)

demo: install
	$(VENV)/bin/aifab demo
	@echo "aifab is installed in $(VENV): run it as $(abspath $(VENV))/bin/aifab ..."
	@echo "or activate the venv first: . $(VENV)/bin/activate && aifab --help"

# pytest exits 5 when it collected no tests: that is a failure here, not a pass.
test: install browser promtool
	@$(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests"; exit 1; fi; exit $$rc

lint: install
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/mypy src
	$(VENV)/bin/lint-imports

check: lint test

bench-data: install
	$(PY) bench/data_clean.py

bench-ingest: install
	$(PY) bench/ingest.py

bench-tracking: install
	$(PY) bench/tracking.py

clean:
	rm -rf $(VENV) .aifab .pytest_cache .mypy_cache .ruff_cache
