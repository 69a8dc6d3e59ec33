"""myriad — distributed LLM training runtime.

The heavy lifting is in C++ (the `_myriad` extension built by CMake into this folder); this
package re-exports it. Tensors convert to and from NumPy without copies on the CPU:

    import numpy as np, myriad
    t = myriad.from_numpy(np.ones((2, 3), np.float32))   # shares memory
    t.numpy()[0, 0] = 5                                  # visible through t
"""
import os as _os
import sys as _sys

# Open MPI loads its transport plugins with dlopen and resolves them against libmpi's symbols:
# the extension (which links libmpi) must be loaded with RTLD_GLOBAL, as mpi4py does.
_flags = _sys.getdlopenflags()
_sys.setdlopenflags(_flags | _os.RTLD_GLOBAL)
# The imports below come after that load on purpose (hence noqa: E402).
try:
    from . import _myriad  # noqa: F401 - loaded here for its dlopen flags; the imports below reuse it
finally:
    _sys.setdlopenflags(_flags)
from ._myriad import __version__ as __version__  # noqa: E402 - set from CMakeLists.txt's project(VERSION)
from ._myriad import data  # noqa: E402 - myriad-data's tokenize, dedup, mix, inspect
from ._myriad import (BpeTokenizer, Config, Error,  # noqa: E402 - after the RTLD_GLOBAL load
                      MpiRuntime, ProcessGroups, Tensor, dry_run, empty, encrypted_file_key_id,
                      export_safetensors, fresh_run_conflict, from_numpy, full, import_safetensors, ops, philox4x32,
                      randn, read_safetensors, tokenize_corpus, write_safetensors, zeros)
from .engine import Engine, GradientSlice  # noqa: E402 - the C++ engine with Python step and gradient hooks

__all__ = ["BpeTokenizer", "Config", "Engine", "Error", "GradientSlice", "MpiRuntime", "ProcessGroups", "Tensor",
           "data", "dry_run", "empty", "encrypted_file_key_id", "export_safetensors", "fresh_run_conflict",
           "from_numpy", "full", "import_safetensors", "ops", "philox4x32", "randn", "read_safetensors",
           "tokenize_corpus", "write_safetensors", "zeros"]
