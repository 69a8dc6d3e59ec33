#!/usr/bin/env python3
"""The training driver as a script of the source tree — the launch line of the README, the docs
and the cluster-training recipe:

    mpirun -np 2 python3 python/train.py --config configs/gpt2_tiny.yaml --log_dir runs/tiny

It runs myriad.train.main (python/myriad/train.py), the program an installed package runs as
`myriad-train` or `python -m myriad.train`. The package next to this file comes first on the
path (Python puts the script's folder there); without a built extension the driver module is
loaded from its file, so that --help and flag errors still answer.
"""
import importlib.util
import os
import sys


def driver():
    try:
        from myriad import train
        return train
    except ImportError:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "myriad", "train.py")
        spec = importlib.util.spec_from_file_location("myriad_train_driver", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


if __name__ == "__main__":
    sys.exit(driver().main(sys.argv[1:]))
