"""Loading and importing: every bad input gets its typed error; provenance uses ONNX names."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import external_data_helper, helper

import byoc
from byoc.errors import (
    DynamicShapeError,
    ExternalDataError,
    InvalidModelError,
    ModelNotFoundError,
    NotOnnxError,
    TruncatedModelError,
    UnsupportedOpsError,
)

from models import const, model, small_cnn, tensor


def test_loads_from_path_bytes_and_proto_without_touching_the_proto(tmp_path):
    m = small_cnn()
    before = m.SerializeToString()
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    for source in (path, str(path), before, m):
        imported = byoc.import_model(source)
        assert [s.name for s in imported.inputs] == ["input"]
    assert m.SerializeToString() == before


def test_provenance_uses_onnx_node_names():
    imported = byoc.import_model(small_cnn())
    assert set(n.name for n in imported.node_of.values()) == {
        "conv1", "bn1", "relu1", "pool1", "conv2", "relu2", "gap", "flatten", "fc"}
    ops = {n.name: n.op_type for n in imported.node_of.values()}
    assert ops["bn1"] == "BatchNormalization" and ops["fc"] == "Gemm"


def test_unnamed_nodes_get_unique_names():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    imported = byoc.import_model(model(nodes, [tensor("x", [2])], [tensor("y", [2])]))
    assert sorted(n.name for n in imported.node_of.values()) == ["Relu_0", "Relu_1"]


def test_missing_file(tmp_path):
    with pytest.raises(ModelNotFoundError, match="not found"):
        byoc.import_model(tmp_path / "nope.onnx")


def test_not_onnx(tmp_path):
    path = tmp_path / "readme.onnx"
    path.write_text("this is a text file, not a model\n" * 20)
    with pytest.raises(NotOnnxError, match="not an ONNX"):
        byoc.import_model(path)


def test_zero_byte_file(tmp_path):
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(NotOnnxError, match="empty"):
        byoc.import_model(path)


@pytest.mark.parametrize("fraction", [0.3, 0.5, 0.9])
def test_truncated_file(tmp_path, fraction):
    data = small_cnn().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises((TruncatedModelError, InvalidModelError), match="truncated|checker"):
        byoc.import_model(path)


def test_unsupported_ops_are_listed_together():
    nodes = [helper.make_node("FancyOp", ["x"], ["a"], name="first", domain="com.vendor"),
             helper.make_node("Relu", ["a"], ["b"], name="ok"),
             helper.make_node("OtherOp", ["b"], ["y"], name="second", domain="com.vendor")]
    graph = helper.make_graph(nodes, "g", [tensor("x", [2])], [tensor("y", [2])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.vendor", 1)],
                          ir_version=8)
    with pytest.raises(UnsupportedOpsError) as info:
        byoc.import_model(m)
    assert [(n, op) for n, op, _ in info.value.ops] == [("first", "FancyOp"), ("second", "OtherOp")]
    assert "first" in str(info.value) and "second" in str(info.value)


def _external_model(tmp_path, location):
    m = model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [tensor("x", [4])], [tensor("y", [4])],
              [const("w", np.arange(4, dtype=np.float32))])
    weights = m.graph.initializer[0]
    external_data_helper.set_external_data(weights, location=location)
    weights.ClearField("raw_data")
    weights.ClearField("float_data")
    weights.data_location = onnx.TensorProto.EXTERNAL
    path = tmp_path / "model.onnx"
    path.write_bytes(m.SerializeToString())
    return path


def test_external_data_is_loaded(tmp_path):
    path = _external_model(tmp_path, "weights.bin")
    (tmp_path / "weights.bin").write_bytes(np.arange(4, dtype="<f4").tobytes())
    art = byoc.compile(path, vendors=["c_source"])
    np.testing.assert_allclose(art.run({"x": np.ones(4, np.float32)})[0], [1, 2, 3, 4])


def test_external_data_missing(tmp_path):
    with pytest.raises(ExternalDataError, match="missing"):
        byoc.import_model(_external_model(tmp_path, "weights.bin"))


@pytest.mark.parametrize("location", ["../outside.bin", "/etc/passwd"])
def test_external_data_outside_the_model_folder_is_refused(tmp_path, location):
    inner = tmp_path / "inner"
    inner.mkdir()
    (tmp_path / "outside.bin").write_bytes(np.zeros(4, "<f4").tobytes())
    with pytest.raises(ExternalDataError, match="outside the model folder"):
        byoc.import_model(_external_model(inner, location))


def test_external_data_from_bytes_needs_a_base_dir(tmp_path):
    data = _external_model(tmp_path, "weights.bin").read_bytes()
    with pytest.raises(ExternalDataError, match="base_dir"):
        byoc.import_model(data)


def _dynamic_model():
    node = helper.make_node("Relu", ["x"], ["y"], name="relu")
    return model([node], [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 4])],
                 [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 4])])


def test_dynamic_input_without_shapes():
    with pytest.raises(DynamicShapeError, match="input_shapes"):
        byoc.import_model(_dynamic_model())


def test_dynamic_input_with_user_shapes():
    art = byoc.compile(_dynamic_model(), vendors=["c_source"], input_shapes={"x": [3, 4]})
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(art.run({"x": x})[0], np.maximum(x, 0))


def test_input_shapes_must_name_inputs():
    with pytest.raises(DynamicShapeError, match="not model inputs"):
        byoc.import_model(_dynamic_model(), input_shapes={"nope": [1]})


def test_checker_failure_is_typed():
    m = small_cnn()
    m.graph.node[0].input[1] = "no_such_tensor"
    with pytest.raises(InvalidModelError):
        byoc.import_model(m)
