#!/usr/bin/env bash
# Make SimGrid's Python bindings importable from the venv, for `hpcshuffle scale`.
#
#   bash scripts/install_simgrid.sh .venv/bin/python
#
# PyPI's `simgrid` is a C++ source build (cmake, Boost, pybind11: minutes), so we use Debian's
# python3-simgrid instead: installed with apt-get when we are root, then ONLY its extension module
# is linked into the venv's site-packages (adding all of dist-packages to sys.path would shadow
# the venv's own packages). Never fails: the rest of the toolkit works without SimGrid, so when it
# can't be had this prints one line saying how to get it and exits 0.
set -u

PY=${1:?usage: install_simgrid.sh VENV_PYTHON}
DIST=/usr/lib/python3/dist-packages
HOW="install Debian's python3-simgrid (apt-get install python3-simgrid) as root, then run \`make install\` again"

if "$PY" -c 'import simgrid' 2>/dev/null; then
    exit 0
fi

# the extension module's name for this Python, e.g. simgrid.cpython-311-x86_64-linux-gnu.so
SO="simgrid$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("platlib"))')

have_debian_so() { compgen -G "$DIST/simgrid.cpython-*.so" >/dev/null; }

if ! have_debian_so; then
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
        echo "note: \`hpcshuffle scale\` needs SimGrid's Python bindings, which are missing: $HOW (everything else works without them)"
        exit 0
    fi
    echo "installing Debian's python3-simgrid (SimGrid's Python bindings, for \`hpcshuffle scale\`)"
    export DEBIAN_FRONTEND=noninteractive
    log=$(mktemp)
    # apt's output only if it fails; a fresh machine may have empty package lists: update then
    if ! { apt-get install -y -q python3-simgrid || { apt-get update -q && apt-get install -y -q python3-simgrid; }; } >"$log" 2>&1; then
        tail -n 20 "$log"
        rm -f "$log"
        echo "note: apt-get could not install python3-simgrid; \`hpcshuffle scale\` needs it: $HOW"
        exit 0
    fi
    rm -f "$log"
fi

if [ ! -e "$DIST/$SO" ]; then
    # Debian builds it for its own Python only (3.11 on Debian 12); another version can't load it
    built=$(cd "$DIST" && ls simgrid.cpython-*.so | head -n 1 | sed 's/^simgrid\.cpython-\([0-9]\)\([0-9]*\)-.*/\1.\2/')
    echo "note: \`hpcshuffle scale\` can't use Debian's SimGrid: it is built for Python $built ($(cd "$DIST" && ls simgrid.cpython-*.so | head -n 1))," \
         "but $PY is Python $("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])'): recreate the venv with Python $built (rm -rf .venv && make install PYTHON=python$built)"
    exit 0
fi

ln -sfn "$DIST/$SO" "$SITE/$SO"
if ! err=$("$PY" -c 'import simgrid' 2>&1); then
    echo "note: linked $DIST/$SO into $SITE, but it doesn't import; \`hpcshuffle scale\` won't work:"
    echo "$err" | tail -n 3
    exit 0
fi
echo "SimGrid $("$PY" -c 'import simgrid; print(simgrid.simgrid_version)' 2>/dev/null) linked into $SITE"
