"""``auto_pad`` as Keras exports write it (tf2onnx's SAME_UPPER "same" convs and pools, VALID), with symbolic
dims: the preparation writes it out as ``pads`` where the padding is known
(``byoc.pipeline.frontend.prepare.explicit_pads``), so TVM's importer, which works SAME padding out with
``int()`` on the sizes, takes the model. Each model runs at odd and even sizes against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import byoc
from byoc.pipeline.frontend.prepare.explicit_pads import explicit_pads

from models import const, model, onnxruntime_outputs, rng, tensor


def _any_shape(name):
    """A 4-D output whose dims shape inference works out."""
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [f"{name}_{i}" for i in range(4)])


def _weights(cout, cin, k, seed):
    return (rng(seed).standard_normal((cout, cin, k, k)) * 0.3).astype(np.float32)


def _check(m, shapes, vendors=("dnnl",)):
    """Compile once with the model's symbolic dims; every shape in ``shapes`` matches onnxruntime."""
    artifact = byoc.compile(m, vendors=list(vendors))
    for shape in shapes:
        x = rng(len(shape)).standard_normal(shape).astype(np.float32)
        for got, want in zip(artifact.run({"x": x}), onnxruntime_outputs(m, {"x": x})):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    return artifact


def _mtcnn_like(pool_kernel: int, height="h", width="w"):
    """tf2onnx's MTCNN stem: NHWC in, Transpose, a VALID conv, PRelu, a SAME_UPPER max pool of stride 2."""
    nodes = [helper.make_node("Transpose", ["x"], ["t"], name="to_nchw", perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["t", "w", "b"], ["c"], name="conv", auto_pad="VALID", kernel_shape=[3, 3]),
             helper.make_node("PRelu", ["c", "slope"], ["p"], name="prelu"),
             helper.make_node("MaxPool", ["p"], ["y"], name="pool", auto_pad="SAME_UPPER",
                              kernel_shape=[pool_kernel] * 2, strides=[2, 2])]
    slope = (rng(3).uniform(0.05, 0.3, (10, 1, 1))).astype(np.float32)
    return model(nodes, [tensor("x", ["n", height, width, 3])], [_any_shape("y")],
                 [const("w", _weights(10, 3, 3, 1)), const("b", np.zeros(10, np.float32)), const("slope", slope)],
                 opset=12)


def test_a_same_upper_pool_after_a_prelu_with_a_symbolic_batch_imports():
    """MTCNN R-net's form: static spatial sizes, symbolic batch. TVM's importer alone fails at the pool
    ("int() argument must be ... not 'Var'")."""
    artifact = _check(_mtcnn_like(3, 24, 24), [(1, 24, 24, 3), (3, 24, 24, 3)])
    assert len(artifact.plan.partitions) == 1


@pytest.mark.parametrize("vendors", [("dnnl",), ("c_source",)])
def test_a_2x2_same_upper_max_pool_over_symbolic_sizes_is_a_ceil_mode_pool(vendors):
    """MTCNN P-net's form: height and width symbolic; odd sizes pad one row and column at the end."""
    _check(_mtcnn_like(2), [(1, 12, 12, 3), (1, 13, 18, 3), (2, 21, 16, 3)], vendors)


@pytest.mark.parametrize("mode", ["SAME_UPPER", "SAME_LOWER"])
def test_same_convs_and_pools_of_stride_1_over_symbolic_sizes(mode):
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", auto_pad=mode, kernel_shape=[4, 4]),
             helper.make_node("AveragePool", ["c"], ["y"], name="pool", auto_pad=mode, kernel_shape=[2, 2])]
    m = model(nodes, [tensor("x", ["n", 4, "h", "w"])], [_any_shape("y")], [const("w", _weights(6, 4, 4, 2))])
    _check(m, [(1, 4, 9, 10), (2, 4, 8, 7)])


@pytest.mark.parametrize("mode", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_a_strided_same_conv_of_known_sizes_with_a_symbolic_batch(mode):
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", auto_pad=mode, kernel_shape=[3, 3],
                              strides=[2, 2])]
    m = model(nodes, [tensor("x", ["n", 3, 15, 16])], [_any_shape("y")], [const("w", _weights(5, 3, 3, 4))])
    _check(m, [(1, 3, 15, 16), (2, 3, 15, 16)])


def test_padding_that_depends_on_a_symbolic_size_is_left_to_the_importer():
    """A 3x3 pool of stride 2 over a symbolic size: its SAME padding's start depends on the size's parity."""
    m = _mtcnn_like(3)
    pool = next(n for n in explicit_pads(m).graph.node if n.name == "pool")
    assert helper.get_attribute_value(next(a for a in pool.attribute if a.name == "auto_pad")) == b"SAME_UPPER"
