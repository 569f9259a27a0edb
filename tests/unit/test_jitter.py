"""The training thread's jitter fitted to a lockstep iteration of ranks sharing cores (scale/jitter.py)."""

from __future__ import annotations

import numpy as np
import pytest

from hpcshuffle.scale.jitter import fit_noise, mean_iteration, shared_makespan
from hpcshuffle.scale.platform import Distribution


@pytest.mark.parametrize(("works", "cores", "makespan"), [
    ([1.0, 1.0, 1.0], 2, 1.5),   # three equal tasks on two cores: 2/3 of a core each
    ([1.0, 1.0, 3.0], 2, 3.5),   # the two short ones done at 1.5; the long one then runs alone at 1 core
    ([1.0, 2.0], 2, 2.0),        # no more tasks than cores: the longest decides
    ([2.0], 0.5, 4.0),           # half a core
])
def test_fair_sharing_of_cores(works, cores, makespan):
    assert shared_makespan(np.array(works), cores) == pytest.approx(makespan)


def test_the_fitted_noise_gives_back_the_measured_iteration():
    noise = fit_noise(0.02, 0.05, ranks=3, cores=2)
    assert noise.dist == "lognormal" and noise.cv == 1.0 and 0 < noise.mean < 0.05
    assert mean_iteration(0.02, noise, 3, 2) == pytest.approx(0.05, rel=1e-6)


def test_no_noise_where_fair_sharing_already_explains_the_iteration():
    # three ranks of 0.02 s on two cores: 0.03 s without any jitter
    assert mean_iteration(0.02, Distribution("fixed", 0.0), 3, 2) == pytest.approx(0.03)
    assert fit_noise(0.02, 0.029, ranks=3, cores=2) == Distribution("fixed", 0.0)
