"""pytest set-up: makes the in-tree package importable and gives each test a fresh seed."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))


@pytest.fixture
def rng(request):
    seed = int(os.environ.get("MYRIAD_TEST_SEED", np.random.SeedSequence().entropy % (2**63)))
    request.node.user_properties.append(("seed", seed))
    print(f"seed {seed} (replay with MYRIAD_TEST_SEED={seed})")
    return np.random.default_rng(seed)
