"""SimGrid's Python bindings, found wherever they are, or an error that says how to get them.

PyPI's `simgrid` is a C++ source build (cmake, Boost, pybind11), so `make install` takes Debian's
python3-simgrid (SimGrid 3.32) instead and links its one extension module into the venv
(scripts/install_simgrid.sh). If the package is installed but the link isn't there (the venv
predates it), `load_simgrid` loads that extension module straight from Debian's file; it never puts
all of dist-packages on sys.path, which would shadow the venv's own packages.

SimGrid prints "[xbt_cfg/INFO] Configuration change: Set 'contexts/factory' to 'thread'" to stderr
when imported; that is harmless.
"""

from __future__ import annotations

import importlib.util
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

# Debian's extension module for this Python: simgrid.cpython-311-x86_64-linux-gnu.so on Debian 12;
# tests patch it
DEBIAN_SIMGRID = Path("/usr/lib/python3/dist-packages") / f"simgrid{sysconfig.get_config_var('EXT_SUFFIX')}"

FIX = (
    "`hpcshuffle scale` needs SimGrid's Python bindings (3.32+): run `make install` as root "
    "(installs Debian's python3-simgrid and links it into .venv), or `apt-get install python3-simgrid` "
    "and link /usr/lib/python3/dist-packages/simgrid.cpython-311-*.so into your venv's site-packages"
)


class SimGridMissing(ValueError):
    """SimGrid's bindings can't be imported (a ValueError, so the CLI prints it as an error)."""


def load_simgrid() -> ModuleType:
    """The `simgrid` module: the importable one, else Debian's extension module, else SimGridMissing."""
    try:
        import simgrid
    except ImportError as err:
        missing = err
    else:
        return simgrid
    if DEBIAN_SIMGRID.is_file():
        return _load_extension(DEBIAN_SIMGRID)
    raise SimGridMissing(f"{FIX}{_abi_note()} ({missing})")


def _load_extension(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("simgrid", path)
    if spec is None or spec.loader is None:
        raise SimGridMissing(f"{FIX} ({path} is not a loadable extension module)")
    try:
        module = importlib.util.module_from_spec(spec)  # an extension module initialises here
        spec.loader.exec_module(module)
    except ImportError as err:
        raise SimGridMissing(f"{FIX} (loading {path}: {err})") from err
    sys.modules["simgrid"] = module
    return module


def _abi_note() -> str:
    """Why Debian's module, if it is there for another Python, can't be used by this one."""
    others = sorted(DEBIAN_SIMGRID.parent.glob("simgrid.cpython-*.so"))
    if not others:
        return ""
    built = ", ".join("-".join(p.name.split(".")[1].split("-")[:2]) for p in others)  # cpython-311
    return (
        f"; Debian's SimGrid is built for {built} but this is Python "
        f"{sys.version_info.major}.{sys.version_info.minor}: use a venv made with that Python"
    )
