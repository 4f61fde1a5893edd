"""pyproject lists every package folder (the folder mapping needs them spelled out)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {
    "pagoda": ROOT / "pagoda",
    "pagoda.engine": ROOT / "engine",
    "pagoda.operator": ROOT / "operator",
}


def test_every_package_folder_is_listed():
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = set()
    for package, folder in SOURCES.items():
        for init in folder.rglob("__init__.py"):
            relative = init.parent.relative_to(folder).parts
            found.add(".".join((package, *relative)))
    assert found == listed, f"missing {sorted(found - listed)}, stale {sorted(listed - found)}"


def test_package_imports_resolve_to_the_mapped_folders():
    import pagoda.engine
    import pagoda.operator

    assert Path(pagoda.engine.__file__).parent == ROOT / "engine"
    assert Path(pagoda.operator.__file__).parent == ROOT / "operator"
