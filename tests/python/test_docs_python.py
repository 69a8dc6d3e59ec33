"""docs/python.md runs: its ```python blocks, in order, as one program in a fresh folder (the first
block writes the corpus there). A block that raises fails the test, naming the block."""
import os
import re

from package_under_test import REPO

BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def test_docs_python_md_examples_run(tmp_path, monkeypatch, capsys):
    text = open(os.path.join(REPO, "docs", "python.md")).read()
    blocks = BLOCK.findall(text)
    assert len(blocks) >= 6, "docs/python.md lost its examples"
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "docs_python"}
    for number, block in enumerate(blocks, 1):
        try:
            exec(compile(block, f"docs/python.md block {number}", "exec"), namespace)
        except Exception as e:  # noqa: BLE001 — reported with the block
            raise AssertionError(f"docs/python.md block {number} failed: {type(e).__name__}: {e}\n{block}") from e
    out = capsys.readouterr().out
    assert "step 3: loss" in out and "(1, 4, 320)" in out and "has the largest gradient" in out
