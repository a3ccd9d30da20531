"""NonMaxSuppression: TVM's converter takes an empty result (0 boxes) for limits it cannot read as constants,
and suppresses a box whose IoU equals the threshold where ONNX keeps it. byoc refuses the first and corrects the
second. Checked on ONNX's own node test cases and their expected outputs, with the limits as initializers."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import byoc
from byoc.conformance import _compare, collect_cases
from byoc.errors import UnsupportedAttributeError

NAMES = [c[0] for c in collect_cases() if c[0].startswith("test_nonmaxsuppression")]


def with_constant_limits(model_bytes: bytes, inputs: list) -> onnx.ModelProto:
    """The case's model with its three limits (inputs 2-4) as initializers of the values the case feeds."""
    model = onnx.load_from_string(model_bytes)
    for vi, value in list(zip(model.graph.input, inputs))[2:]:
        model.graph.initializer.append(numpy_helper.from_array(np.asarray(value), vi.name))
    del model.graph.input[2:]
    return model


@pytest.mark.parametrize("case", collect_cases(NAMES), ids=lambda c: c[0])
def test_non_max_suppression_with_constant_limits_gives_onnx_expected_boxes(case):
    _, model_bytes, data, rtol, atol = case
    inputs, expected = data[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        artifact = byoc.compile(with_constant_limits(model_bytes, inputs), vendors=byoc.list_vendors())
    assert _compare(artifact.run(inputs[:2]), expected, rtol, atol) is None


def test_limits_given_at_run_time_are_refused_by_name():
    _, model_bytes, _, _, _ = collect_cases(["test_nonmaxsuppression_two_classes"])[0]
    with pytest.raises(UnsupportedAttributeError, match="NonMaxSuppression node .*max_output_boxes_per_class"):
        byoc.compile(onnx.load_from_string(model_bytes), vendors=["dnnl"])
