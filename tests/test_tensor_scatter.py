"""TensorScatter (opset 24), a KV cache's update (byoc/pipeline/frontend/tensor_scatter.py), against onnxruntime:
one artifact with symbolic batch and sequence runs a prefill and decode steps, linear and circular; an update past
the cache's end in linear mode is a typed error."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import byoc
from byoc.errors import InputShapeError
from models import onnxruntime_outputs


def _model(mode: str, with_indices: bool = True) -> onnx.ModelProto:
    """A cache [batch, 2, 6, 4] updated by [batch, 2, seq, 4] along axis -2, then doubled (a vendor op after it)."""
    inputs = [helper.make_tensor_value_info("past", TensorProto.FLOAT, ["batch", 2, 6, 4]),
              helper.make_tensor_value_info("update", TensorProto.FLOAT, ["batch", 2, "seq", 4])]
    names = ["past", "update"]
    if with_indices:
        inputs.append(helper.make_tensor_value_info("write", TensorProto.INT64, ["batch"]))
        names.append("write")
    nodes = [helper.make_node("TensorScatter", names, ["present"], name="scatter", mode=mode),
             helper.make_node("Add", ["present", "present"], ["doubled"], name="double")]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 2, 6, 4]) for n in ("present", "doubled")]
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs), opset_imports=[helper.make_opsetid("", 24)])


def _feeds(batch: int, seq: int, write=None) -> dict:
    rng = np.random.default_rng(batch * 10 + seq)
    feeds = {"past": rng.standard_normal((batch, 2, 6, 4)).astype(np.float32),
             "update": rng.standard_normal((batch, 2, seq, 4)).astype(np.float32)}
    if write is not None:
        feeds["write"] = np.array(write, np.int64)
    return feeds


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_a_prefill_and_decode_steps_match_onnxruntime(mode):
    model = _model(mode)
    artifact = byoc.compile(model, vendors=["dnnl"])
    calls = [(2, 3, [0, 0]), (2, 1, [3, 5]), (1, 1, [5]), (3, 2, [0, 4, 2])]
    if mode == "circular":
        calls += [(2, 3, [5, 4]), (1, 6, [3])]  # wrapping around the cache's end
    for batch, seq, write in calls:
        feeds = _feeds(batch, seq, write)
        for got, want in zip(artifact.run(feeds), onnxruntime_outputs(model, feeds)):
            np.testing.assert_array_equal(got, want)


def test_without_write_indices_rows_are_written_from_0():
    model = _model("linear", with_indices=False)
    feeds = _feeds(2, 3)
    for got, want in zip(byoc.compile(model, vendors=["dnnl"]).run(feeds), onnxruntime_outputs(model, feeds)):
        np.testing.assert_array_equal(got, want)


def test_an_update_past_the_cache_end_is_a_typed_error():
    artifact = byoc.compile(_model("linear"), vendors=["dnnl"])
    for seq, write in ((2, [5, 0]), (1, [-1, 0]), (7, [0, 0])):
        with pytest.raises(InputShapeError, match="TensorScatter"):
            artifact.run(_feeds(2, seq, write))



def test_an_unknown_mode_is_refused_by_name():
    with pytest.raises(byoc.errors.UnsupportedAttributeError, match="mode='ring'"):
        byoc.compile(_model("ring"), vendors=["dnnl"])
