"""pytest set-up: makes the in-tree package importable (unless the tests run against the
installed one, package_under_test.py) and gives each test a fresh seed."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from package_under_test import INSTALLED, REPO  # noqa: E402

if not INSTALLED:
    sys.path.insert(0, os.path.join(REPO, "python"))

# torch (the Hugging Face interchange tests) before myriad: both link libnccl.so.2, and whichever
# loads first serves the other; a CUDA build of myriad links the toolkit's NCCL, which lacks
# symbols the newer NCCL of torch's wheels has (docs/python.md).
try:
    import torch  # noqa: F401
except ImportError:
    pass


@pytest.fixture
def rng(request):
    seed = int(os.environ.get("MYRIAD_TEST_SEED", np.random.SeedSequence().entropy % (2**63)))
    request.node.user_properties.append(("seed", seed))
    print(f"seed {seed} (replay with MYRIAD_TEST_SEED={seed})")
    return np.random.default_rng(seed)


def pytest_report_header(config):
    import myriad
    return f"myriad {myriad.__version__} from {os.path.dirname(myriad.__file__)}"
