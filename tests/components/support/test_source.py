"""Fingerprints of source code."""

import os
import shutil

import components
from components.support import source


def test_the_code_version_moves_with_any_edit_to_the_package(tmp_path):
    copy = tmp_path / "components"
    shutil.copytree(os.path.dirname(components.__file__), copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = source.source_digest(str(copy))
    (copy / "custom" / "__pycache__").mkdir(exist_ok=True)
    (copy / "custom" / "__pycache__" / "gate.cpython-310.pyc").write_bytes(b"compiled")
    assert source.source_digest(str(copy)) == before  # bytecode is not the code
    gate = copy / "custom" / "gate.py"
    gate.write_text(gate.read_text().replace("def DataGate(", "def DataGate(  # edited\n", 1))
    assert source.source_digest(str(copy)) != before
