# aifab: `make demo` runs the quickstart, `make test` the whole suite, `make check` every gate.
# Each target creates .venv if missing and installs torch==2.13.0 (CPU build) FIRST: anything
# that pulls torch before it would download a multi-GB CUDA build.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.aifab-installed
# --durations=30: the log ends with the 30 slowest tests, where the suite's time goes.
PYTEST_ARGS ?= -n 2 --dist loadfile --durations=30

.PHONY: install lock system-tools demo test check lint bench-data bench-ingest bench-tracking clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# constraints.txt pins every package (see its header): resolution is then one pass, and a fresh
# clone gets the versions the suite passed with.
# requirements-llamaindex.txt: LlamaIndex needs openai<3, so it lives in a side folder (see there).
$(STAMP): pyproject.toml constraints.txt requirements-llamaindex.txt | $(PY)
	$(PY) -m pip install --quiet --upgrade 'pip>=24'
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -c constraints.txt -e '.[all,dev]'
	rm -rf $(VENV)/llamaindex
	$(PY) -m pip install --quiet --no-deps --target $(VENV)/llamaindex -r requirements-llamaindex.txt
	touch $(STAMP)

# Rewrite constraints.txt from the installed venv (after a dependency change and a green suite).
lock: install
	@{ sed -n '/^#/p' constraints.txt; $(PY) -m pip freeze --exclude-editable | grep -iv '^aifab'; } \
	  > constraints.txt.new && mv constraints.txt.new constraints.txt

# Debian packages some tests drive: chromium (the dashboard's browser tests; Playwright's own
# download does not work offline), prometheus (promtool, for the exported alert rules) and jq
# (the README's commands, run by the tour test). Installed when missing and we may (root);
# otherwise the tests that need them skip, naming why.
SYSTEM_TOOLS := chromium:chromium promtool:prometheus jq:jq redis-server:redis-server

system-tools:
	@for pair in $(SYSTEM_TOOLS); do cmd=$${pair%%:*}; pkg=$${pair##*:}; \
	  command -v $$cmd >/dev/null 2>&1 && continue; \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's $$pkg for the tests that use $$cmd"; \
	    apt-get install -y -q $$pkg >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null && apt-get install -y -q $$pkg >/dev/null; } || \
	    echo "warning: could not install $$pkg: the tests that use $$cmd will skip"; \
	  else echo "warning: no $$cmd (apt-get install $$pkg): the tests that use it will skip"; fi; \
	done

install: $(STAMP)

demo: install
	$(VENV)/bin/aifab demo
	@echo "aifab is installed in $(VENV): run it as $(abspath $(VENV))/bin/aifab ..."
	@echo "or activate the venv first: . $(VENV)/bin/activate && aifab --help"

# pytest exits 5 when it collected no tests: that is a failure here, not a pass.
test: install system-tools
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
