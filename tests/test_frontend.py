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


def test_dynamic_input_without_shapes_stays_symbolic():
    imported = byoc.import_model(_dynamic_model())
    assert imported.inputs[0].shape == ("batch", 4) and imported.outputs[0].shape == ("batch", 4)
    assert set(imported.dims) == {"batch"}


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


# -- what TVM alone builds, byoc builds too (issue 13) -----------------------------------
def _mvn_model(opset: int = 13) -> onnx.ModelProto:
    """MeanVarianceNormalization: ONNX's strict shape inference fails on its function body
    from opset 13 on, while TVM imports it."""
    node = helper.make_node("MeanVarianceNormalization", ["x"], ["y"], name="mvn")
    graph = helper.make_graph([node], "mvn", [tensor("x", [2, 3, 4, 4])], [tensor("y", [2, 3, 4, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def test_strict_shape_inference_failure_warns_and_falls_back_to_non_strict():
    from models import onnxruntime_outputs

    m = _mvn_model()
    with pytest.raises(Exception):  # the premise: ONNX's strict inference rejects this model
        onnx.shape_inference.infer_shapes(m, strict_mode=True)
    with pytest.warns(RuntimeWarning, match=r"strict mode inside an op's function body \(.*MeanVarianceNormalization"):
        art = byoc.compile(m, vendors=["c_source"])
    x = np.random.default_rng(3).standard_normal((2, 3, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(art.run({"x": x})[0], onnxruntime_outputs(m, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_shapes_that_contradict_inference_are_still_refused():
    """Only a failure inside an op's function body falls back; a wrong model stays refused."""
    node = helper.make_node("Relu", ["x"], ["y"], name="relu")
    m = model([node], [tensor("x", [2, 3])], [tensor("y", [2, 4])])
    with pytest.raises(InvalidModelError, match="shape inference failed.*differ"):
        byoc.import_model(m)


def test_a_model_strict_inference_accepts_gives_no_warning(recwarn):
    byoc.import_model(small_cnn())
    assert not [w for w in recwarn if "strict mode" in str(w.message)]


def _empty_input_model(rows: int = 0) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Add", ["r", "x"], ["y"], name="add")]
    return model(nodes, [tensor("x", [rows, 4])], [tensor("y", [rows, 4])])


@pytest.mark.parametrize("vendors", [["c_source"], ["json_runtime"], ["dnnl"]])
def test_zero_sized_model_input_is_accepted_and_runs(vendors):
    imported = byoc.import_model(_empty_input_model())
    assert imported.inputs[0].shape == (0, 4) and imported.outputs[0].shape == (0, 4)
    plan = byoc.partition(imported, vendors)
    # Nothing to offload in an empty tensor: every vendor says why instead of failing.
    assert not plan.partitions
    assert all(d.reasons.get(vendors[0]) for d in plan.decisions.values())
    out = byoc.build(plan, strict=True).run({"x": np.zeros((0, 4), np.float32)})
    assert out[0].shape == (0, 4) and out[0].dtype == np.float32


def test_zero_sized_intermediate_tensors_are_refused_by_dnnl_with_a_reason_and_computed_by_c_source():
    i64 = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
    nodes = [helper.make_node("Slice", ["x", "s", "e", "a"], ["z"], name="slice"),  # rows 2:2 -> empty
             helper.make_node("Relu", ["z"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w"], ["y"], name="matmul")]
    m = model(nodes, [tensor("x", [4, 4])], [tensor("y", [0, 3])],
              [const("s", i64(2)), const("e", i64(2)), const("a", i64(0)), const("w", np.ones((4, 3), np.float32))])
    x = np.ones((4, 4), np.float32)
    dnnl = byoc.partition(m, ["dnnl"])
    assert not dnnl.partitions
    assert any("zero-sized" in d.reasons.get("dnnl", "") for d in dnnl.decisions.values())
    for plan in (dnnl, byoc.partition(m, ["c_source"])):
        out = byoc.build(plan, strict=True).run({"x": x})
        assert out[0].shape == (0, 3)


def test_user_input_shapes_must_still_be_positive():
    with pytest.raises(DynamicShapeError, match="not a size or a dim's name"):
        byoc.import_model(_dynamic_model(), input_shapes={"x": [0, 4]})


def test_negative_declared_extent_is_an_unnamed_symbolic_dim():
    """Exporters and onnxruntime's quantizer write -1 for "unknown": it becomes a symbolic dim named after its input."""
    m = _empty_input_model()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = -2
    assert byoc.import_model(m).inputs[0].shape == ("x_dim0", 4)


def test_slice_with_runtime_starts_and_ends_builds():
    """Starts/ends are inputs: TVM's FoldConstant leaks a shape-function call byoc must drop."""
    node = helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["y"], name="slice")
    int64 = onnx.TensorProto.INT64
    m = model([node], [tensor("x", [6, 5]), tensor("starts", [1], int64), tensor("ends", [1], int64)],
              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["r", 5])],
              [const("axes", np.array([0], dtype=np.int64))])
    art = byoc.compile(m, vendors=["c_source"])
    x = np.arange(30, dtype=np.float32).reshape(6, 5)
    for start, end in ((1, 4), (-2, 100), (3, 3)):
        out = art.run({"x": x, "starts": np.array([start]), "ends": np.array([end])})
        np.testing.assert_array_equal(out[0], x[start:end])


def test_optional_tensor_input_has_the_shape_of_its_tensor():
    opt = helper.make_value_info("x", helper.make_optional_type_proto(
        helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, [4])))
    node = helper.make_node("OptionalGetElement", ["x"], ["y"], name="get")
    graph = helper.make_graph([node], "opt", [opt], [tensor("y", [4])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    imported = byoc.import_model(m)
    assert [(s.name, s.shape, s.dtype) for s in imported.inputs] == [("x", (4,), "float32")]
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(byoc.compile(m, vendors=["c_source"]).run({"x": x})[0], x)


def test_input_shapes_that_change_a_fixed_dim_warn_and_explain_a_failure():
    # small_cnn: input fixed at 1x3x16x16, and the Gemm output fixes the batch at 1

    with pytest.warns(RuntimeWarning, match=r"input 'input' is fixed at \[1, 3, 16, 16\] in the model and "
                                            r"input_shapes makes it \[1, 3, 32, 32\] \(dim 2, 3\)"):
        imported = byoc.import_model(small_cnn(), input_shapes={"input": [1, 3, 32, 32]})
    assert imported.inputs[0].shape == (1, 3, 32, 32)
    with pytest.warns(RuntimeWarning), pytest.raises(
            byoc.InvalidModelError, match=r"the model does not work at the shape given: input 'input' is fixed at "
                                          r"\[1, 3, 16, 16\].*\[2, 3, 16, 16\] \(dim 0\), and the model hard-codes "
                                          r"the original size \(ONNX shape inference: .*node name: fc"):
        byoc.import_model(small_cnn(), input_shapes={"input": [2, 3, 16, 16]})
    with pytest.raises(byoc.DynamicShapeError, match=r"has rank 3, but the model's input 'input' is "
                                                     r"\[1, 3, 16, 16\] \(rank 4\)"):
        byoc.import_model(small_cnn(), input_shapes={"input": [1, 3, 16]})


def _relu_model(**graph_extras) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Neg", ["r"], ["y"], name="neg")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])], **graph_extras)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_minus_one_dim_written_for_unknown_is_read_as_unknown():
    """onnxruntime's quantizer writes value_info with -1 for PP-OCR's batch dim; strict inference saw a contradiction."""
    m = _relu_model(value_info=[helper.make_tensor_value_info("r", onnx.TensorProto.FLOAT, [-1, 3])])
    m.ir_version = 8
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(byoc.compile(m, vendors=[]).run({"x": x})[0], -np.maximum(x, 0))


def test_an_ir3_model_whose_tool_added_initializers_without_inputs_imports():
    """The light zoo's IR-3 models quantized by onnxruntime: scales and zero points are initializers only."""
    nodes = [helper.make_node("Mul", ["x", "k"], ["y"], name="mul")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [3])],
                              [onnx.numpy_helper.from_array(np.float32(2.0), "k")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    m.ir_version = 3
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(m)  # what byoc met
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(byoc.compile(m, vendors=[]).run({"x": x})[0], 2 * x)
    assert m.ir_version == 3  # the user's model is not touched


def test_nodes_are_sorted_by_what_their_subgraphs_read_too():
    """A node whose If branch reads a value computed later in the file (onnxruntime's quantizer wrote Silero so)."""
    then = helper.make_graph([helper.make_node("Neg", ["late"], ["t"], name="then_neg")], "then", [],
                             [helper.make_tensor_value_info("t", onnx.TensorProto.FLOAT, [3])])
    other = helper.make_graph([helper.make_node("Identity", ["late"], ["e"], name="else_id")], "else", [],
                              [helper.make_tensor_value_info("e", onnx.TensorProto.FLOAT, [3])])
    nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other, name="if"),
             helper.make_node("Relu", ["x"], ["late"], name="relu")]  # after the If that reads it
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [3])],
                              [onnx.numpy_helper.from_array(np.array(True), "cond")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    x = np.array([-1.0, 0.5, 2.0], dtype=np.float32)
    np.testing.assert_array_equal(byoc.compile(m, vendors=[]).run({"x": x})[0], -np.maximum(x, 0))


def test_symbolic_dims_keep_the_models_names_and_name_the_unnamed_ones():
    """One name is one dim across inputs; an unnamed dim is named after its input and axis."""
    def info(name, dims):
        return helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, dims)

    nodes = [helper.make_node("Relu", ["input_ids"], ["a"], name="relu"),
             helper.make_node("Neg", ["pixel_values"], ["b"], name="neg"),
             helper.make_node("Abs", ["scale"], ["c"], name="abs")]
    m = model(nodes, [info("input_ids", ["batch", "sequence"]), info("pixel_values", ["batch", 3, "height", None]),
                      info("scale", [2])],
              [info("a", ["batch", "sequence"]), info("b", ["batch", 3, "height", None]), info("c", [2])])
    imported = byoc.import_model(m)
    assert [s.shape for s in imported.inputs] == [("batch", "sequence"), ("batch", 3, "height", "pixel_values_dim3"),
                                                  (2,)]
    assert sorted(imported.dims) == ["batch", "height", "pixel_values_dim3", "sequence"]
    fixed = byoc.import_model(m, dims={"batch": 2, "sequence": "..64"})
    assert fixed.inputs[0].shape == (2, "sequence") and fixed.dims["sequence"].max == 64
    with pytest.raises(DynamicShapeError, match="no input of the model has"):
        byoc.import_model(m, dims={"batchsize": 2})


def test_functions_the_model_defines_are_inlined():
    """torch's exporters write modules as model-local functions when not asked to inline them: their calls run
    as the functions' bodies, as onnxruntime runs them, where the import refused an op of an unknown domain."""
    import onnxruntime as ort
    from onnx import TensorProto

    body = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Sigmoid", ["r"], ["y"], name="sig")]
    function = helper.make_function("pkg.torch.mine", "Block", ["x"], ["y"], body, [helper.make_opsetid("", 17)])
    call = helper.make_node("Block", ["a"], ["b"], domain="pkg.torch.mine", name="block0")
    graph = helper.make_graph([call], "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 3])])
    m = helper.make_model(graph, functions=[function],
                          opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("pkg.torch.mine", 1)])
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    got = byoc.compile(m, vendors=[]).run({"a": x})[0]
    np.testing.assert_allclose(got, ort.InferenceSession(m.SerializeToString()).run(None, {"a": x})[0], rtol=1e-6)


@pytest.mark.parametrize("domain,op,advice", [
    ("org.pytorch.aten", "SomeOp", "ONNX_ATEN_FALLBACK"), ("pkg.onnxscript.torch_lib", "SomeOp", "optimize=True"),
    ("ai.onnx.ml", "Scaler", "classical machine learning"), ("com.vendor", "SomeOp", "replace them in the exporter")])
def test_an_op_of_an_exporters_own_domain_is_named_with_what_to_do(domain, op, advice):
    """Each exporter's non-ONNX domain gets the setting that avoids it (the node and its domain named)."""
    node = helper.make_node(op, ["x"], ["y"], name="the_node", domain=domain)
    graph = helper.make_graph([node], "g", [tensor("x", [2])], [tensor("y", [2])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)],
                          ir_version=8)
    with pytest.raises(UnsupportedOpsError, match=f"the_node \\({op} in domain {domain}\\).*{advice}"):
        byoc.import_model(m)


def test_one_computation_where_layers_repeat_it():
    """Two layers that compute the same positions from the same symbolic dim (reading it off different tensors,
    as a decoder's glue does per layer) share one binding; the report says what the second node became."""
    from onnx import TensorProto

    one = const("one", np.array(1, np.int64))
    zero = const("zero", np.array(0, np.int64))
    nodes = []
    for layer, x in ((0, "a"), (1, "b")):
        nodes += [helper.make_node("Shape", [x], [f"s{layer}"], name=f"shape{layer}"),
                  helper.make_node("Gather", [f"s{layer}", "one"], [f"n{layer}"], name=f"length{layer}"),
                  helper.make_node("Range", ["zero", f"n{layer}", "one"], [f"r{layer}"], name=f"range{layer}"),
                  helper.make_node("Cast", [f"r{layer}"], [f"p{layer}"], name=f"cast{layer}", to=TensorProto.FLOAT),
                  helper.make_node("Add", [x, f"p{layer}"], [f"y{layer}"], name=f"add{layer}")]
    m = model(nodes, [tensor("a", [1, "n"]), tensor("b", [1, "n"])], [tensor("y0", [1, "n"]), tensor("y1", [1, "n"])],
              [one, zero])
    imported = byoc.import_model(m)
    text = str(imported.mod["main"])
    assert text.count("R.arange") == 1, text
    assert "computes what" in imported.prepared["range1"] or "computes what" in imported.prepared["cast1"]
    a, b = np.zeros((1, 5), np.float32), np.ones((1, 5), np.float32)
    y0, y1 = byoc.compile(m, vendors=[]).run({"a": a, "b": b})
    np.testing.assert_array_equal(y0, np.arange(5, dtype=np.float32)[None])
    np.testing.assert_array_equal(y1, 1 + np.arange(5, dtype=np.float32)[None])


def test_one_table_lookup_where_layers_repeat_it_and_activations_stay_apart():
    """A float result made only of glue and constants (a rotary table gathered at the positions, once per layer in
    onnxruntime-genai's attention) is one binding too; a float computation of an activation is left as written,
    even where two are alike (the preparation copies some on purpose, one per unit)."""
    rng = np.random.default_rng(0)
    table = const("table", rng.standard_normal((16, 4)).astype(np.float32))
    scale = const("scale", np.array(0.5, np.float32))
    nodes = []
    for layer in (0, 1):
        nodes += [helper.make_node("Shape", ["x"], [f"s{layer}"], name=f"shape{layer}"),
                  helper.make_node("Gather", [f"s{layer}", "one"], [f"n{layer}"], name=f"length{layer}"),
                  helper.make_node("Range", ["zero", f"n{layer}", "one"], [f"r{layer}"], name=f"range{layer}"),
                  helper.make_node("Gather", ["table", f"r{layer}"], [f"t{layer}"], name=f"lookup{layer}"),
                  helper.make_node("Mul", ["x", "scale"], [f"h{layer}"], name=f"scaled{layer}"),
                  helper.make_node("Add", [f"h{layer}", f"t{layer}"], [f"y{layer}"], name=f"add{layer}")]
    m = model(nodes, [tensor("x", [1, "n", 4])], [tensor("y0", [1, "n", 4]), tensor("y1", [1, "n", 4])],
              [const("one", np.array(1, np.int64)), const("zero", np.array(0, np.int64)), table, scale])
    text = str(byoc.import_model(m).mod["main"])
    assert text.count("R.take") == 1, text
    assert text.count("R.multiply") == 2, text
    x = rng.standard_normal((1, 5, 4)).astype(np.float32)
    from onnx.reference import ReferenceEvaluator

    expected = ReferenceEvaluator(m).run(None, {"x": x})
    for got, want in zip(byoc.compile(m, vendors=[]).run({"x": x}), expected):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
