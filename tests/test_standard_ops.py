"""Forms TVM's ONNX converters compute wrong without an error, which byoc rewrites (prepare/standard_ops.py) or
imports its own way (importer.py), checked on ONNX's node test cases against their expected outputs."""

from __future__ import annotations

import onnx
import pytest

import byoc
from byoc.conformance import collect_cases, run_cases
from byoc.errors import UnsupportedAttributeError

# Each failed with TVM alone, with no error: a wrong value or a wrong shape.
SILENTLY_WRONG_IN_TVM = [
    "test_isinf_negative", "test_isinf_positive",  # IsInf's detect_negative / detect_positive ignored
    "test_spacetodepth_crd_mode_example",  # SpaceToDepth mode=CRD computed as DCR
    "test_convtranspose_output_shape",  # ConvTranspose's output_shape ignored: (1, 2, 9, 7) for (1, 2, 10, 8)
    "test_expand_dim_changed",  # Expand to a run-time shape: a 1 in the shape did not keep the input's 3
]


def test_forms_tvm_computes_wrong_give_onnx_expected_outputs():
    summary = run_cases(collect_cases(SILENTLY_WRONG_IN_TVM), jobs=2, timeout=180)
    assert [(r.name, r.byoc_error) for r in summary.results if not r.byoc] == []
    assert [r.name for r in summary.results if r.plain] == []  # TVM alone still gets them wrong
    assert len(summary.results) == len(SILENTLY_WRONG_IN_TVM)


def test_batch_normalization_in_training_mode_is_refused_by_name():
    _, model_bytes, _, _, _ = collect_cases(["test_batchnorm_example_training_mode"])[0]
    with pytest.raises(UnsupportedAttributeError, match="BatchNormalization node .*training_mode=1"):
        byoc.compile(onnx.load_from_string(model_bytes), vendors=["dnnl"])
