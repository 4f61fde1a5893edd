"""crds/ and the chart's CRDs are generated from operator/api/: stale files fail here."""

from __future__ import annotations

import yaml

from pagoda.operator.api.crd import inference_service_crd
from pagoda.operator.api.generate import ROOT, generated_files, stale_files


def test_generated_crds_are_up_to_date():
    stale = [str(p.relative_to(ROOT)) for p in stale_files()]
    assert not stale, f"stale generated files {stale}: run `make generate`"


def test_stale_check_notices_an_edit(tmp_path, monkeypatch):
    path, text = next(iter(generated_files().items()))
    copy = tmp_path / path.name
    copy.write_text(text + "# edited by hand\n")
    import pagoda.operator.api.generate as generate

    monkeypatch.setattr(generate, "generated_files", lambda: {copy: text})
    assert generate.stale_files() == [copy]


def test_repository_crd_is_the_plain_manifest():
    crd = yaml.safe_load((ROOT / "crds/serving.pagoda.dev_inferenceservices.yaml").read_text())
    assert crd == inference_service_crd()
