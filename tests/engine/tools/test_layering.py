"""engine/tools/layering.py: the engine's folders are its layers, and the check notices
when they stop being."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pagoda.engine.tools import layering


def test_the_engine_keeps_its_layers():
    report = layering.check()
    assert report.ok, "\n".join(report.lines())
    for imp in report.explained_upward:  # each exception says why
        assert len(imp.reason) > 20, imp


def test_the_script_runs_as_a_command():
    done = subprocess.run(
        [sys.executable, "-m", "pagoda.engine.tools.layering"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "upward imports, each with its reason" in done.stdout


@pytest.fixture
def engine_copy(tmp_path, monkeypatch):
    """A throwaway engine tree the check reads instead of the real one."""
    root = tmp_path / "engine"

    def write(files: dict[str, str]) -> layering.Report:
        for name, text in files.items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text))
        monkeypatch.setattr(layering, "ENGINE", root)
        return layering.check()

    return write


def _init(*packages: str) -> dict[str, str]:
    return {"__init__.py": ""} | {f"{p}/__init__.py": "" for p in packages}


def test_a_cycle_through_a_function_level_import_is_found(engine_copy):
    report = engine_copy(
        _init("engine_core")
        | {
            "engine_core/client.py": "from pagoda.engine.engine_core.mp_client import X\n",
            "engine_core/mp_client.py": (
                "def f():\n    from pagoda.engine.engine_core import client\n"
            ),
        }
    )
    assert report.cycles == [["engine_core.client", "engine_core.mp_client", "engine_core.client"]]


def test_type_checking_imports_make_no_cycle(engine_copy):
    report = engine_copy(
        _init("runner")
        | {
            "runner/a.py": "from pagoda.engine.runner import b\n",
            "runner/b.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from pagoda.engine.runner import a\n",
        }
    )
    assert report.cycles == []


def test_torch_reaching_the_core_through_a_leaf_is_found(engine_copy):
    report = engine_copy(
        _init("core")
        | {
            "core/scheduler.py": "from pagoda.engine.messages import M\n",
            "messages.py": "import torch\n",
        }
    )
    assert report.impure_core == ["core imports torch: core.scheduler -> messages (line 1)"]
    assert not report.ok


def test_an_upward_import_needs_a_reason(engine_copy):
    files = _init("kernels", "runner") | {"runner/model_runner.py": ""}
    upward = "from pagoda.engine.runner import model_runner\n"
    report = engine_copy(files | {"kernels/plan.py": upward})
    assert [(i.source, i.target) for i in report.unexplained_upward] == [
        ("kernels.plan", "runner.model_runner")
    ]
    explained = "# layering: the plan reads the runner's row limit, for this test\n"
    report = engine_copy({"kernels/plan.py": explained + upward})
    assert report.ok and report.explained_upward[0].reason.startswith("the plan reads")


def test_a_module_in_no_layer_is_an_error_that_says_where_to_add_it(engine_copy):
    with pytest.raises(KeyError, match="add 'plugins' to LAYERS"):
        engine_copy(
            _init("plugins")
            | {"plugins/x.py": "from pagoda.engine import config\n", "config.py": ""}
        )


def test_every_layer_names_folders_and_modules_that_exist():
    names = {n for layer in layering.LAYERS for n in layer}
    present = {p.stem if p.is_file() else p.name for p in Path(layering.ENGINE).iterdir()}
    assert names <= present | {"__init__"}, names - present
