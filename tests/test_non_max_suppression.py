"""NonMaxSuppression: TVM's converter takes an empty result (0 boxes) for limits it cannot read as constants,
and suppresses a box whose IoU equals the threshold where ONNX keeps it. byoc computes limits given at run time
with TOPI's kernel directly and corrects the second. Checked on ONNX's own node test cases and their expected
outputs, with the limits as initializers and as the inputs the cases feed."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import byoc
from byoc.conformance import _compare, collect_cases
from models import onnxruntime_outputs

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


@pytest.mark.parametrize("case", collect_cases(NAMES), ids=lambda c: c[0])
def test_non_max_suppression_with_limits_given_at_run_time_gives_onnx_expected_boxes(case):
    """The cases as ONNX writes them: the limits are inputs (byoc/pipeline/frontend/run_time_nms.py)."""
    _, model_bytes, data, rtol, atol = case
    inputs, expected = data[0]
    artifact = byoc.compile(onnx.load_from_string(model_bytes), vendors=["dnnl"])
    assert _compare(artifact.run(inputs), expected, rtol, atol) is None


def test_one_artifact_runs_every_limit_given_at_run_time():
    """Each box count, IoU threshold (one at an IoU the boxes have exactly: ONNX keeps such a box) and score
    threshold fed to one artifact: onnxruntime's boxes every time (none for a negative count)."""
    _, model_bytes, data, _, _ = collect_cases(["test_nonmaxsuppression_two_classes"])[0]
    model = onnx.load_from_string(model_bytes)
    artifact = byoc.compile(model, vendors=["dnnl"])
    boxes, scores = data[0][0][:2]
    for count, iou, score in ((0, 0.5, 0.0), (1, 0.5, 0.0), (3, 0.0, 0.35), (10, 1.0, -1.0), (-2, 0.5, 0.0)):
        feeds = dict(zip([i.name for i in model.graph.input],
                         [boxes, scores, np.array([count], np.int64), np.array([iou], np.float32),
                          np.array([score], np.float32)]))
        (got,) = artifact.run(feeds)
        np.testing.assert_array_equal(got, onnxruntime_outputs(model, feeds)[0])
