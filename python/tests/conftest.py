"""Fixtures shared by the package's tests."""
import os

import numpy as np
import pytest


@pytest.fixture
def rng():
    """A fresh random generator per test, its seed printed (DEPTHDEC_TEST_SEED=<n> replays it)."""
    seed = int(os.environ.get("DEPTHDEC_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
    print("random inputs: DEPTHDEC_TEST_SEED=%d" % seed)
    return np.random.default_rng(seed)
