"""The reconciler's pure decisions."""

from __future__ import annotations

from pagoda.operator.reconcile import change_action


def obj(generation=None, rv="1"):
    meta = {"resourceVersion": rv}
    if generation is not None:
        meta["generation"] = generation
    return {"metadata": meta}


def test_missing_child_is_created_or_restored():
    assert change_action(None, obj(1), spec_changed=True) == "Created"
    assert change_action(None, obj(1), spec_changed=False) == "Restored"


def test_unchanged_apply_is_no_action():
    assert change_action(obj(3, "10"), obj(3, "10"), spec_changed=True) is None


def test_generation_decides_for_kinds_that_have_one():
    # the Deployment controller wrote status in between: not a change of ours
    assert change_action(obj(3, "10"), obj(3, "11"), spec_changed=False) is None
    assert change_action(obj(3, "10"), obj(4, "12"), spec_changed=False) == "Restored"
    assert change_action(obj(3, "10"), obj(4, "12"), spec_changed=True) == "Updated"


def test_resource_version_decides_for_kinds_without_generation():
    assert change_action(obj(None, "5"), obj(None, "6"), spec_changed=False) == "Restored"


def test_a_merge_patch_drops_the_keys_the_new_value_lacks():
    from pagoda.operator.kube import merge_patch

    old = {"weights": {"v1": 50, "v2": 50}, "step": 1, "baseline": {"v1": {"requests": 3}}}
    new = {"weights": {"v2": 100}, "step": 2, "baseline": {}}
    assert merge_patch(old, new) == {
        "weights": {"v1": None, "v2": 100},
        "step": 2,
        "baseline": {"v1": None},
    }
    assert merge_patch(None, new) == new and merge_patch(old, None) is None
