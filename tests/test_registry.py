"""One authority each: series names, fault classes, detector roles, routing rules, the part file's
top-k keys; the JSON Schema is checked against the enums."""

from __future__ import annotations

import numpy as np
import pytest

from ckptscan.drills.evaluate import truth_class
from ckptscan.drills.train import FAULTS
from ckptscan.judge import classify
from ckptscan.judge.faults import UNKNOWN, FaultClass, from_drill_name
from ckptscan.layouts.base import ROUTINGS
from ckptscan.monitors import DETECTORS, FAMILIES, REGISTRY, Role, names, spec
from ckptscan.monitors.activations import routing_scores
from ckptscan.pipeline.activations import topk_by_layer, topk_key
from ckptscan.report.schema import summary_schema


@pytest.mark.parametrize(
    "name, base",
    [
        ("attn.D2.entropy2", "attn.D2.entropy2"),
        ("attn_rope.D2.entropy2", "attn.D2.entropy2"),
        ("router.update_ratio", "router.update_ratio"),
        ("act.attn.max_logit", "act.attn.max_logit"),
    ],
)
def test_series_names(name, base):
    assert names.base(name) == base
    assert names.same_monitor(name, base)
    assert spec(name) is REGISTRY[base]


def test_series_name_parts():
    assert names.split("attn_rope.M.entropy2") == ("attn_rope", "M.entropy2")
    assert names.is_attention("attn_rope.q.update_ratio") and not names.is_attention("act.attn.max_logit")
    assert not names.same_monitor("act.attn.entropy_mean", "attn.entropy_mean")
    assert not names.same_monitor("router.update_ratio", "attn.update_ratio")


def test_schema_fault_types_are_the_enum():
    props = summary_schema()["$defs"]["verdict"]["properties"]
    assert set(props["fault_type"]["enum"]) == {f.value for f in FaultClass} | {UNKNOWN}


def test_classify_names_only_enum_classes_and_paths():
    for path in classify.CONFIDENCE:
        assert FaultClass(path.split("/")[0])


def test_drill_spelling_round_trips():
    assert FAULTS == ("none", "lowprec-attention", "high-lr", "combined")
    for f in FaultClass:
        assert from_drill_name(f.drill_name) is f
    assert truth_class({"fault": "lowprec-attention"}) == "lowprec_attention"
    assert truth_class({"fault": "none"}) == truth_class({"fault": "benign"}) == "healthy"
    assert truth_class({"fault": "strange"}) == "strange"


def test_every_detector_has_a_role_and_watches_a_family_series():
    own = {s.name: f for f in FAMILIES for s in f.series}
    assert DETECTORS and all(d.monitor in own for d in DETECTORS)
    assert all(Role(d.role) for d in DETECTORS)


def test_one_list_of_routing_rules():
    import torch

    z = torch.randn(4, 6)
    for r in ROUTINGS:
        routing_scores(z, torch.zeros(6), r, 2)
    with pytest.raises(ValueError, match="unknown routing"):
        routing_scores(z, None, "nope", 2)


def test_topk_keys_round_trip():
    extras = {topk_key(3): np.zeros((5, 2)), topk_key(11): np.ones((5, 2)), "other": np.zeros(1)}
    assert sorted(topk_by_layer(extras)) == [3, 11]
