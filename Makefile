# The two commands of the quick start: `make demo` and `make test`. Both create ./.venv on first use.
# `make check` is the inner loop: lint and the unit tier, at most 5 minutes.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RANKS ?= 4
EPOCHS ?= 4
DEMO := results/demo

.PHONY: install simgrid demo check test test-stress clean

install: $(STAMP) simgrid

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.14.1 torchvision==0.29.1
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# SimGrid's Python bindings, for `hpcshuffle scale`: Debian's python3-simgrid, linked into the venv
# (apt-get as root; otherwise one line on how to get it). Not in the stamp, so `make install` run
# later as root still adds it; a single import when it is already there.
simgrid: $(STAMP)
	@bash scripts/install_simgrid.sh $(BIN)/python

# GS, LS and PLS q=0.3 on $(RANKS) mpiexec ranks on the CPU, then the breakdown side by side
demo: $(STAMP)
	rm -rf $(DEMO)
	PATH=$(CURDIR)/$(BIN):$$PATH bash scripts/demo.sh $(RANKS) $(EPOCHS) $(DEMO)

# the inner loop, in a few minutes: lint (ruff), the layer contract (import-linter), then the unit
# tier, stopping at the first failure (docs/testing.md)
check: $(STAMP) simgrid
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -q -x tests/unit

# -rs prints why a test skipped: without root and without a running Slurm the Slurm tier skips, saying so;
# the 15 slowest tests and the time by tier (tests/conftest.py) close the report
test: $(STAMP) simgrid
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -q -rs --durations=15 tests

# the suite as a slower machine runs it: a CPU hog busy on core 0 the whole time (stopped by its PID at the
# end, pass or fail); the tests' deadlines scale by the slowdown they measure at the start (docs/testing.md)
test-stress: $(STAMP) simgrid
	@taskset -c 0 $(BIN)/python -c "while True: pass" & hog=$$!; \
	echo "CPU hog on core 0: pid $$hog"; \
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -q -rs --durations=15 tests; status=$$?; \
	kill $$hog; exit $$status

clean:
	rm -rf $(VENV) results/runs results/demo data
