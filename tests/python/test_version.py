"""The version is written once, in CMakeLists.txt's project(VERSION), and reaches the package
through the extension (myriad.__version__)."""
import pathlib
import re

import myriad

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_version_is_written_once_in_cmakelists_and_reaches_the_package():
    text = (ROOT / "CMakeLists.txt").read_text()
    version = re.search(r"project\(myriad VERSION ([0-9.]+)", text).group(1)
    assert myriad.__version__ == version
    python_sources = "".join(p.read_text() for p in (ROOT / "python" / "myriad").glob("*.py"))
    assert f'"{version}"' not in python_sources, "the version is written a second time in the package"
