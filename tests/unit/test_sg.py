"""SimGrid's bindings: found (installed by `make install`), or an error that says how to get them."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from hpcshuffle.scale import sg


def test_load_simgrid_returns_the_bindings():
    simgrid = sg.load_simgrid()
    assert hasattr(simgrid, "Engine")
    assert tuple(int(part) for part in simgrid.simgrid_version.split(".")[:2]) >= (3, 32)


def test_missing_simgrid_says_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "simgrid", None)  # `import simgrid` raises ImportError
    monkeypatch.setattr(sg, "DEBIAN_SIMGRID", tmp_path / "simgrid.cpython-311-x86_64-linux-gnu.so")
    with pytest.raises(sg.SimGridMissing) as caught:
        sg.load_simgrid()
    assert isinstance(caught.value, ValueError)  # the CLI prints ValueErrors as errors
    assert "apt-get install python3-simgrid" in str(caught.value)
    assert "make install" in str(caught.value)


def test_missing_simgrid_for_another_python_names_the_mismatch(monkeypatch, tmp_path):
    (tmp_path / "simgrid.cpython-399-x86_64-linux-gnu.so").touch()
    monkeypatch.setitem(sys.modules, "simgrid", None)
    monkeypatch.setattr(sg, "DEBIAN_SIMGRID", tmp_path / "simgrid.cpython-311-x86_64-linux-gnu.so")
    with pytest.raises(sg.SimGridMissing, match="built for cpython-399"):
        sg.load_simgrid()


@pytest.mark.skipif(not sg.DEBIAN_SIMGRID.is_file(), reason=f"no Debian SimGrid at {sg.DEBIAN_SIMGRID}")
def test_falls_back_to_debians_module_when_not_linked():
    # in a fresh process: an extension module initialises once per process
    code = textwrap.dedent("""
        import sys
        sys.modules["simgrid"] = None  # as if the venv had no link to it
        from hpcshuffle.scale import sg
        simgrid = sg.load_simgrid()
        assert simgrid.__file__ == str(sg.DEBIAN_SIMGRID), simgrid.__file__
        assert sys.modules["simgrid"] is simgrid
        print(simgrid.Engine.__name__)
    """)
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Engine"
