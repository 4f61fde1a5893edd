"""The generated dashboards type-check against Grafana's own dashboard types
(@grafana/schema 11.6, the Grafana they are built for) under `tsc --strict`: each
dashboard as a `Dashboard` object literal (so a field Grafana's schema does not know is
an error, not ignored), and each time-series panel's custom field config as that panel
plugin's `FieldConfig` (GraphFieldConfig)."""

from __future__ import annotations

import json
import subprocess

import pytest

from pagoda.operator.observability.dashboards import dashboard_models
from tests.operator.observability import grafana_schema

# Grafana's types name enum members (StackingMode.Normal) where JSON holds their values
# ("normal"): JSONForm<T> is T with each enum replaced by the union of its values, and
# otherwise the same shape, so excess and missing fields are still errors.
JSON_FORM = """type JSONForm<T> = T extends string ? `${T}` : T extends number | boolean | null
  ? T : T extends (infer U)[] ? JSONForm<U>[] : T extends object
  ? { [K in keyof T]: JSONForm<T[K]> } : T;"""


def typescript(models: dict[str, dict]) -> str:
    lines = [
        # the time-series plugin's FieldConfig is the package's GraphFieldConfig
        'import type { Dashboard, GraphFieldConfig } from "@grafana/schema";',
        JSON_FORM,
    ]
    for name, model in models.items():
        lines.append(f"export const {name}: JSONForm<Dashboard> = {json.dumps(model, indent=1)};")
        for panel in model["panels"]:
            custom = panel.get("fieldConfig", {}).get("defaults", {}).get("custom")
            if panel["type"] == "timeseries" and custom:
                lines.append(
                    f"export const {name}_{panel['id']}: JSONForm<GraphFieldConfig> = "
                    f"{json.dumps(custom)};"
                )
    return "\n".join(lines) + "\n"


def check(tmp_path, models: dict[str, dict]) -> subprocess.CompletedProcess:
    tsc = grafana_schema.tsc()
    if tsc is None:
        pytest.skip("Grafana's schema is not installed: make grafana-schema (needs npm)")
    (tmp_path / "dashboards.ts").write_text(typescript(models))
    modules = grafana_schema.cache_dir() / "node_modules"
    (tmp_path / "node_modules").symlink_to(modules)
    config = {
        "compilerOptions": {
            "strict": True, "noEmit": True, "skipLibCheck": True, "target": "es2022",
            "module": "nodenext", "moduleResolution": "nodenext",
        },
        "files": ["dashboards.ts"],
    }  # fmt: skip
    (tmp_path / "tsconfig.json").write_text(json.dumps(config))
    return subprocess.run(
        ["node", str(tsc), "-p", str(tmp_path)], capture_output=True, text=True, timeout=300
    )


def test_dashboards_type_check_against_grafanas_schema(tmp_path):
    checked = check(tmp_path, dashboard_models())
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_check_refuses_a_field_grafana_does_not_know(tmp_path):
    models = dashboard_models()
    broken = {"serving": models["serving"]}
    broken["serving"]["panels"][1]["fieldConfig"]["defaults"]["custom"]["fillOpacity"] = "lots"
    broken["serving"]["templating"]["list"][1]["auto"] = False
    checked = check(tmp_path, broken)
    assert checked.returncode != 0
    assert """'"auto"' does not exist in type""" in checked.stdout
    assert "Type 'string' is not assignable to type 'number'" in checked.stdout
