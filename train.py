#!/usr/bin/env python3
"""The 1.6T MoE recipe's launch line, as written, from the repository root:

    mpirun -np 256 -hostfile hostfile python train.py --config config.yaml --log_dir /logs/train

The same driver as python/train.py (myriad.train.main; docs/launch.md), with this tree's python/
package first on the path.
"""
import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "python"))
runpy.run_path(os.path.join(HERE, "python", "train.py"), run_name="__main__")
