"""The worked numbers of docs/models.md hold: each ``python -c "..."  # expected`` command in it runs, and prints
the numbers its comment states (to the digits the comment shows)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

MODELS = Path(__file__).resolve().parents[1] / "docs" / "models.md"
# python -c "CODE"   # EXPECTED  (CODE may run over several lines, each indented by the markdown)
COMMAND = re.compile(r'^( *)python -c "(.*?)"(?:[ \t]+# ([^\n]*))?$', re.S | re.M)
NUMBER = re.compile(r"-?\d+(?:\.\d*)?(?:e[-+]?\d+)?", re.I)


def commands() -> list[tuple[int, str, str | None]]:
    text = MODELS.read_text()
    out = []
    for match in COMMAND.finditer(text):
        indent, code, expected = match.groups()
        lines = code.split("\n")
        code = "\n".join([lines[0], *(line.removeprefix(indent) for line in lines[1:])])
        out.append((text.count("\n", 0, match.start()) + 1, code, expected))
    return out


CASES = commands()


def test_the_catalogue_has_worked_commands():
    # one per model at least where practical: a silent empty scan would pass everything
    assert len(CASES) >= 20


def _matches(expected: str, printed: str) -> bool:
    """Every number of ``expected``, in order, equals the next numbers of ``printed`` rounded to its digits."""
    want = NUMBER.findall(expected)
    got = [float(x) for x in NUMBER.findall(printed)]
    position = 0
    for text in want:
        decimals = len(text.split(".")[1]) if "." in text and "e" not in text.lower() else 0
        value = float(text)
        tolerance = 0.5 * 10.0**-decimals * (1 + 1e-9) + 1e-12 * abs(value)
        while position < len(got) and abs(got[position] - value) > tolerance:
            position += 1
        if position == len(got):
            return False
        position += 1
    return True


@pytest.mark.parametrize("line,code,expected", CASES, ids=[f"line{line}" for line, _, _ in CASES])
def test_worked_command_prints_what_the_catalogue_says(line, code, expected):
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, f"docs/models.md:{line}", "exec"), {})
    assert printed.getvalue().strip(), f"docs/models.md:{line} printed nothing"
    if expected is not None and NUMBER.search(expected):
        assert _matches(expected, printed.getvalue()), (
            f"docs/models.md:{line} says {expected!r}, the code prints {printed.getvalue().strip()!r}"
        )
