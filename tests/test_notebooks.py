"""Every notebook in notebooks/ runs top to bottom (nbclient), in a temporary working directory.

The kernel is this interpreter (a kernelspec written into the temporary directory), so the
notebooks see the fabricsim under test whatever kernels the machine has registered. A notebook
must write nothing: the notebooks/ folder is unchanged afterwards. ``FABRICSIM_NOTEBOOK_SMALL=1``
is set for the kernel: notebooks that read it (fabrics.ipynb) run at reduced sizes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 300
KERNEL = "fabricsim-test-python"


def test_notebooks_found():
    assert NOTEBOOKS, "notebooks/ holds no notebook"
    assert {"validation.ipynb", "fabrics.ipynb"} <= {p.name for p in NOTEBOOKS}


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "fabricsim test",
                "language": "python",
            }
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("FABRICSIM_NOTEBOOK_SMALL", "1")  # the kernel inherits this environment
    work = tmp_path / "cwd"
    work.mkdir()
    before = sorted(p.name for p in (ROOT / "notebooks").iterdir())

    notebook = nbformat.read(path, as_version=4)
    NotebookClient(
        notebook, timeout=CELL_TIMEOUT_S, kernel_name=KERNEL, resources={"metadata": {"path": str(work)}}
    ).execute()  # raises on any failing cell

    errors = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    assert sorted(p.name for p in (ROOT / "notebooks").iterdir()) == before
