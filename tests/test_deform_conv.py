"""DeformConv (byoc/pipeline/frontend/deform_conv.py), which TVM's importer lacks, against onnxruntime: groups,
offset groups, strides, dilations, pads, a mask and a bias, offsets that move taps between pixels and outside the
input; an input of another rank is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import byoc
from byoc.errors import UnsupportedAttributeError
from models import onnxruntime_outputs


def _model(x_shape, w_shape, out_hw, offset_group=1, with_mask=False, with_bias=False, **attrs):
    taps = w_shape[2] * w_shape[3]
    info = helper.make_tensor_value_info
    inputs = [info("x", TensorProto.FLOAT, list(x_shape)), info("w", TensorProto.FLOAT, list(w_shape)),
              info("offset", TensorProto.FLOAT, [x_shape[0], offset_group * 2 * taps, *out_hw])]
    names = ["x", "w", "offset"]
    if with_bias or with_mask:
        names.append("b" if with_bias else "")
        if with_bias:
            inputs.append(info("b", TensorProto.FLOAT, [w_shape[0]]))
    if with_mask:
        names.append("mask")
        inputs.append(info("mask", TensorProto.FLOAT, [x_shape[0], offset_group * taps, *out_hw]))
    node = helper.make_node("DeformConv", names, ["y"], name="deform", offset_group=offset_group,
                            kernel_shape=list(w_shape[2:]), **attrs)
    graph = helper.make_graph([node], "g", inputs, [info("y", TensorProto.FLOAT, [x_shape[0], w_shape[0], *out_hw])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


CASES = [  # x, w, output's spatial dims, attributes
    ((1, 2, 6, 7), (3, 2, 3, 3), (4, 5), {}),
    ((2, 4, 7, 7), (4, 2, 3, 2), (4, 3), {"group": 2, "offset_group": 2, "strides": [2, 3], "pads": [1, 0, 1, 1]}),
    ((1, 3, 8, 8), (2, 3, 2, 2), (6, 6), {"dilations": [2, 2], "with_mask": True, "with_bias": True}),
]


@pytest.mark.parametrize("x_shape,w_shape,out_hw,attrs", CASES, ids=["plain", "groups-strides-pads", "dilated-masked"])
def test_deform_conv_matches_onnxruntime(x_shape, w_shape, out_hw, attrs):
    model = _model(x_shape, w_shape, out_hw, **attrs)
    r = np.random.default_rng(len(attrs))
    feeds = {"x": r.standard_normal(x_shape).astype(np.float32), "w": r.standard_normal(w_shape).astype(np.float32)}
    for inp in model.graph.input[2:]:
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        scale = 1.7 if inp.name == "offset" else 1.0  # offsets of up to a few pixels, some past the border
        feeds[inp.name] = (r.standard_normal(shape) * scale).astype(np.float32)
    (got,) = byoc.compile(model, vendors=["dnnl"]).run(feeds)
    (want,) = onnxruntime_outputs(model, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_deform_conv_of_another_rank_is_refused_by_name():
    info = helper.make_tensor_value_info
    node = helper.make_node("DeformConv", ["x", "w", "offset"], ["y"], name="deform", kernel_shape=[3])
    graph = helper.make_graph([node], "g", [info("x", TensorProto.FLOAT, [1, 2, 7]), info("w", TensorProto.FLOAT, [3, 2, 3]),
                                            info("offset", TensorProto.FLOAT, [1, 3, 5])],
                              [info("y", TensorProto.FLOAT, [1, 3, 5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    with pytest.raises(UnsupportedAttributeError, match="DeformConv node 'deform'.*2-D DeformConv"):
        byoc.compile(model, vendors=[])
