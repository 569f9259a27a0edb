"""DLIO 2.0.0's PyTorch path without TensorFlow (`make dlio` installs this as `_dlio_no_tf`, imported by a
.pth file at start): dlio_benchmark/profiler/profiler_factory.py imports profiler/tf_profiler.py, which
imports tensorflow, whatever profiler is chosen. A stand-in for that one module lets the rest import;
its only user, `profiler=tensorboard`, then fails with a message instead of an ImportError at start.
"""

import sys
import types

NAME = "dlio_benchmark.profiler.tf_profiler"


class TFProfiler:
    """What profiler_factory.py imports from tf_profiler."""

    @staticmethod
    def get_instance():
        raise RuntimeError("DLIO's profiler=tensorboard needs TensorFlow, which .venv-dlio leaves out (make dlio)")


if NAME not in sys.modules:
    stand_in = types.ModuleType(NAME)
    stand_in.TFProfiler = TFProfiler
    sys.modules[NAME] = stand_in
