"""The committed end-to-end outputs (tests/golden/*.txt) are reproduced byte for byte.

A failure here means a result changed. If the change is intended, rewrite the file in a commit of its
own that says why (``python -m tests.golden.cases --write NAME``); a refactor must not change any.
"""

from __future__ import annotations

import difflib

import pytest

from tests.golden.cases import cases, path

CASES = cases()


def _param(name: str):
    slow = CASES[name][1]
    return pytest.param(name, id=name, marks=(pytest.mark.slow,) if slow else ())


@pytest.mark.parametrize("name", [_param(n) for n in CASES])
def test_golden_output_is_unchanged(name):
    expected = path(name).read_text()
    produced = CASES[name][0]()
    if produced != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(True), produced.splitlines(True), f"golden/{name}.txt", "produced", n=1
            )
        )
        pytest.fail(f"golden output {name} changed:\n{diff[:6000]}")
