"""Where the Python tests take myriad from.

By default, this source tree: python/ on the path (conftest.py, and PYTHONPATH for the drivers the
tests launch), the driver `python/train.py`. With MYRIAD_TEST_INSTALLED=1, the installed package
(`pip install .`, scripts/test.sh does it into build/venv): nothing of the tree's python/ is on the
path (PYTHONPATH is set empty for launched processes) and the driver is the `myriad-train` console
command next to the interpreter, run as `sys.executable <it>` like the script.
"""
import os
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
INSTALLED = os.environ.get("MYRIAD_TEST_INSTALLED") == "1"
# The PYTHONPATH of the processes the tests launch (mpirun exports it with -x PYTHONPATH).
PYTHONPATH = "" if INSTALLED else os.path.join(REPO, "python")
DRIVER = (os.path.join(os.path.dirname(sys.executable), "myriad-train") if INSTALLED else
          os.path.join(REPO, "python", "train.py"))
