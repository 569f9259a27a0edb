# The two commands of the quick start: `make demo` and `make test`. Both create ./.venv on first use.
# `make check` is the inner loop: lint and the unit tier, at most 5 minutes.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RANKS ?= 4
EPOCHS ?= 4
DEMO := results/demo

.PHONY: install simgrid peers dlio demo check test test-stress clean

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

# MosaicML Streaming, the peer measured beside hpcshuffle (docs/peers.md), in a venv of its own: Streaming 0.13
# pins numpy < 2.2 and imports transformers. Its cloud SDKs are left out (--no-deps; it reads local and /pfs
# paths here); torch and hpcshuffle come from ./.venv, after its own packages on sys.path, and mpi4py (which
# hpcshuffle's modules import) finds the mpich wheel's libmpi there.
PEERS := .venv-peers
PEERS_STAMP := $(PEERS)/.installed
DLIO := .venv-dlio
DLIO_STAMP := $(DLIO)/.installed
peers: $(PEERS_STAMP)

$(PEERS_STAMP): $(STAMP)
	test -x $(PEERS)/bin/python || $(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/pip install --quiet --no-deps mosaicml-streaming==0.13.0
	$(PEERS)/bin/pip install --quiet "numpy<2.2" "xxhash<4" zstd Brotli python-snappy tqdm catalogue filelock \
		"transformers>=4.21.3,<5"
	echo "import os, site; os.environ.setdefault('MPI4PY_LIBMPI', '$(CURDIR)/$(VENV)/lib/libmpi.so.12');" \
		"site.addsitedir('$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')')" \
		> "$$($(PEERS)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz_hpcshuffle_venv.pth"
	$(PEERS)/bin/python -c "import streaming, torch, hpcshuffle, numpy; print('Streaming', streaming.__version__, 'numpy', numpy.__version__)"
	touch $(PEERS_STAMP)

# DLIO 2.0.0 (benchmarks/peers.py's other peer, docs/peers.md) in its own venv, its PyTorch path only:
# no TensorFlow or DALI; torch, numpy, hydra and mpi4py come from ./.venv as for .venv-peers;
# pydftracer pinned as DLIO pins it (its own stand-in fails on import); scripts/dlio_no_tf.py stands
# in for the one module that imports TensorFlow unconditionally
dlio: $(DLIO_STAMP)

$(DLIO_STAMP): $(STAMP) scripts/dlio_no_tf.py
	test -x $(DLIO)/bin/python || $(PYTHON) -m venv $(DLIO)
	$(DLIO)/bin/pip install --quiet --no-deps dlio-benchmark==2.0.0 pydftracer==1.0.2
	site=$$($(DLIO)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
	echo "import os, site; os.environ.setdefault('MPI4PY_LIBMPI', '$(CURDIR)/$(VENV)/lib/libmpi.so.12');" \
		"site.addsitedir('$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')')" \
		> $$site/zz_hpcshuffle_venv.pth; \
	cp scripts/dlio_no_tf.py $$site/_dlio_no_tf.py; \
	echo "import _dlio_no_tf" > $$site/zz_dlio_no_tf.pth
	$(DLIO)/bin/pip install --quiet "pandas<3"
	$(DLIO)/bin/python -c "import dlio_benchmark.main, torch; print('DLIO 2.0.0 with torch', torch.__version__)"
	touch $(DLIO_STAMP)

# the inner loop, in a few minutes: lint (ruff), the layer contract (import-linter), then the unit
# tier, stopping at the first failure (docs/testing.md)
check: $(STAMP) simgrid
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -q -x tests/unit

# -rs prints why a test skipped: without root and without a running Slurm the Slurm tier skips, saying so;
# the 15 slowest tests and the time by tier (tests/conftest.py) close the report
test: $(STAMP) simgrid peers
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -q -rs --durations=15 tests

# the suite as a slower machine runs it: a CPU hog busy on core 0 the whole time (stopped by its PID at the
# end, pass or fail); the tests' deadlines scale by the slowdown they measure at the start (docs/testing.md)
test-stress: $(STAMP) simgrid peers
	@taskset -c 0 $(BIN)/python -c "while True: pass" & hog=$$!; \
	echo "CPU hog on core 0: pid $$hog"; \
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -q -rs --durations=15 tests; status=$$?; \
	kill $$hog; exit $$status

clean:
	rm -rf $(VENV) $(PEERS) $(DLIO) results/runs results/demo data
