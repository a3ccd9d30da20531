"""Model preparation (byoc.pipeline.frontend.prepare): folding before TVM's importer, with the user's names kept.

Each model here is one TVM's importer cannot take or splits badly as given;
after preparation it imports, builds with c_source, and matches onnxruntime
run on the user's own (unprepared) model. Reports keep naming the user's
nodes and say what became of the folded ones.
"""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import byoc
from byoc.pipeline.frontend import OnnxNode, check, relax_import, shapes
from byoc.pipeline.frontend.prepare import prepare
from byoc.errors import ModelLoadError
from byoc.tools.onnx_export import partitioned_model
from byoc.tools.report import REPORT_SCHEMA, build_report, render

from models import const, model, onnxruntime_outputs, random_inputs, rng, tensor

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def _compiled_matches_onnxruntime(m: onnx.ModelProto, rtol=1e-4, atol=1e-5):
    artifact = byoc.compile(m, vendors=["c_source"])
    inputs = random_inputs(m)
    got = artifact.run(inputs)
    want = onnxruntime_outputs(m, inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return artifact


def _text(plan) -> str:
    return render(build_report(plan, "m.onnx"), "text")


# -- a shape computation feeding Reshape (PP-OCR's classifier and recognizer) -----------------
def shape_chain() -> onnx.ModelProto:
    """GlobalAveragePool -> Reshape to [batch, -1], the batch read through Shape/Cast/Slice/Cast/Concat."""
    nodes = [
        helper.make_node("GlobalAveragePool", ["x"], ["g"], name="gap"),
        helper.make_node("Shape", ["g"], ["s"], name="shape"),
        helper.make_node("Cast", ["s"], ["s32"], name="to_int32", to=TensorProto.INT32),
        helper.make_node("Slice", ["s32", "zero", "one"], ["batch32"], name="batch"),
        helper.make_node("Cast", ["batch32"], ["batch"], name="to_int64", to=TensorProto.INT64),
        helper.make_node("Concat", ["batch", "minus_one"], ["target"], name="target", axis=0),
        helper.make_node("Reshape", ["g", "target"], ["flat"], name="flatten"),
        helper.make_node("Relu", ["flat"], ["y"], name="relu"),
    ]
    inits = [const("zero", np.array([0], np.int64)), const("one", np.array([1], np.int64)),
             const("minus_one", np.array([-1], np.int64))]
    return model(nodes, [tensor("x", [1, 8, 4, 4])], [tensor("y", [1, 8])], inits, opset=13)


def test_shape_chain_imports_without_preparation_too():
    """The importer keeps Shape -> Gather -> Concat arithmetic as shape values (symbolic dims need it), so the
    Reshape gets its target as a shape even from the unprepared graph, where TVM alone refused it."""
    checked = check.check_model(shape_chain())
    mod = relax_import.to_relax(checked, shapes.model_inputs(checked, {})[0])[0]
    calls = [b.value for block in mod["main"].body.blocks for b in block.bindings]
    (reshape,) = [c for c in calls if c.op.name == "relax.reshape"]
    assert [int(d) for d in reshape.args[1].values] == [1, 8]
    assert not [c for c in calls if c.op.name == "relax.shape_to_tensor"]


def test_shape_chain_feeding_reshape_imports_builds_and_names_user_nodes():
    m = shape_chain()
    before = m.SerializeToString()
    artifact = _compiled_matches_onnxruntime(m)
    assert m.SerializeToString() == before  # the user's ModelProto is never modified
    imported = artifact.plan.imported
    assert imported.prepared == {name: "folded into a constant"
                                 for name in ("shape", "to_int32", "batch", "to_int64", "target")}
    assert {n.name for n in imported.node_of.values()} == {"gap", "flatten", "relu"}
    assert imported.simplifier.startswith("onnxsim ")
    # The model kept for reports and the onnxruntime reference is the user's, nodes and all.
    assert [n.name for n in imported.model.graph.node] == [n.name for n in m.graph.node]
    assert [n.name for n in imported.prepared_model.graph.node] == ["gap", "flatten", "relu"]
    text = _text(artifact.plan)
    assert "folded into a constant: shape, to_int32, batch, to_int64, target" in text
    page = render(build_report(artifact.plan, "m.onnx"), "html")
    assert "<h2>Model preparation</h2>" in page and "shape, to_int32, batch, to_int64, target" in page


def test_an_output_declared_with_the_wrong_rank_keeps_the_shape_the_model_computes():
    """ddddocr's OCR model declares [1, seqlen] for its [seqlen, 1, classes] output.

    onnxsim's folding of it fails strict shape inference, so onnxslim folds it;
    it used to write the declared shape into the last Reshape ([1, -1]).
    """
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "first_two"], ["lead"], name="lead", axis=0),
        helper.make_node("Concat", ["lead", "minus_one"], ["target"], name="target", axis=0),
        helper.make_node("Reshape", ["r", "target"], ["y"], name="reshape"),
    ]
    inits = [const("first_two", np.array([0, 1], np.int64)), const("minus_one", np.array([-1], np.int64))]
    m = model(nodes, [tensor("x", [6, 1, 2, 5])], [tensor("y", [1, "seqlen"])], inits, opset=13)
    artifact = _compiled_matches_onnxruntime(m)
    assert artifact.plan.imported.simplifier.startswith("onnxslim ")
    assert [tuple(o.shape) for o in artifact.outputs] == [(6, 1, 10)]


def test_partitioned_export_keeps_the_folded_shape_chain_with_the_reshape_it_feeds():
    m = shape_chain()
    plan = byoc.partition(m, ["c_source"])
    exported = partitioned_model(plan)
    (function,) = exported.functions
    assert [n.name for n in function.node] == [n.name for n in m.graph.node]
    inputs = random_inputs(m)
    np.testing.assert_allclose(onnxruntime_outputs(exported, inputs)[0], onnxruntime_outputs(m, inputs)[0])


# -- opset-9 BatchNormalization after a Conv (the ONNX model zoo) ---------------------------
def conv_bn(opset: int = 9) -> onnx.ModelProto:
    r = rng(3)
    f = lambda *s: r.standard_normal(s).astype(np.float32) * 0.5  # noqa: E731
    inits = [const("w", f(4, 3, 3, 3)), const("b", f(4)), const("scale", 1 + 0.1 * f(4)), const("shift", f(4)),
             const("mean", f(4)), const("var", np.abs(f(4)) + 0.5), const("w2", f(6, 4, 1, 1))]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["n"], name="bn",
                         epsilon=1e-5),
        helper.make_node("Relu", ["n"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2"),
    ]
    return model(nodes, [tensor("x", [1, 3, 8, 8])], [tensor("y", [1, 6, 8, 8])], inits, opset=opset)


def test_opset9_batchnorm_is_fused_into_its_conv_and_reported():
    m = conv_bn(9)
    artifact = _compiled_matches_onnxruntime(m)
    plan = artifact.plan
    assert plan.imported.prepared == {"bn": "fused into Conv `conv`"}
    assert {n.name for n in plan.imported.node_of.values()} == {"conv", "relu", "conv2"}
    # Without the BN on the host between them, one partition takes the whole chain.
    assert [p.onnx_nodes for p in plan.partitions] == [["conv", "relu", "conv2"]]
    report = build_report(plan, "m.onnx")
    assert report["prepared"]["nodes"] == {"bn": "fused into Conv `conv`"}
    bn = next(n for n in report["nodes"] if n["name"] == "bn")
    assert bn["op_type"] == "BatchNormalization" and bn["detail"] == "before import: fused into Conv `conv`"
    assert "fused into Conv `conv`: bn" in render(report, "text")
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(json.loads(render(report, "json")), REPORT_SCHEMA)


def test_partitioned_export_puts_the_fused_batchnorm_with_its_conv():
    m = conv_bn(9)
    plan = byoc.partition(m, ["c_source"])
    exported = partitioned_model(plan)
    (function,) = exported.functions
    assert [n.name for n in function.node] == ["conv", "bn", "relu", "conv2"]  # the user's nodes
    inputs = random_inputs(m)
    np.testing.assert_allclose(onnxruntime_outputs(exported, inputs)[0], onnxruntime_outputs(m, inputs)[0],
                               rtol=1e-5, atol=1e-6)


def test_verify_runs_onnxruntime_on_the_users_model_not_the_prepared_one():
    from byoc.tools.verify import verify

    plan = byoc.partition(conv_bn(9), ["c_source"])
    assert "BatchNormalization" in {n.op_type for n in plan.imported.model.graph.node}
    assert "BatchNormalization" not in {n.op_type for n in plan.imported.prepared_model.graph.node}
    result = verify(plan)
    assert result.ok, result.lines


@pytest.mark.parametrize("opset", [11, 12])
def test_batchnorm_of_other_old_opsets_is_fused_too(opset):
    """Paddle2ONNX (PP-OCR) exports opset 11."""
    imported = byoc.import_model(conv_bn(opset))
    assert imported.prepared == {"bn": "fused into Conv `conv`"}


@pytest.mark.parametrize("opset", [13, 15])
def test_newer_batchnorm_stays_the_users_node(opset):
    imported = byoc.import_model(conv_bn(opset))
    assert imported.prepared == {}
    assert "bn" in {n.name for n in imported.node_of.values()}


# -- If on a constant, Identity and Dropout -------------------------------------------------
def if_on_constant() -> onnx.ModelProto:
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], name="then_relu")], "then", [],
                               [tensor("t", [2, 3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="else_neg")], "else", [],
                               [tensor("e", [2, 3])])
    nodes = [
        helper.make_node("Constant", [], ["cond"], name="cond",
                         value=helper.make_tensor("c", TensorProto.BOOL, [], [True])),
        helper.make_node("If", ["cond"], ["chosen"], name="choose", then_branch=then_g, else_branch=else_g),
        helper.make_node("Sigmoid", ["chosen"], ["y"], name="sigmoid"),
    ]
    return model(nodes, [tensor("x", [2, 3])], [tensor("y", [2, 3])], opset=13)


def test_if_on_a_constant_becomes_its_branch_and_keeps_the_if_name():
    artifact = _compiled_matches_onnxruntime(if_on_constant())
    imported = artifact.plan.imported
    assert imported.prepared == {
        "cond": "folded into a constant",
        "choose": "If on a constant condition: replaced by the branch it takes (Relu)",
    }
    # The branch's Relu is reported as the user's If node.
    assert {(n.name, n.op_type) for n in imported.node_of.values()} == {("choose", "If"), ("sigmoid", "Sigmoid")}
    plan = byoc.partition(if_on_constant(), ["c_source"], keep_on_host=["choose"])
    assert [d.node.name for d in plan.host_ops] == ["choose"]


def identity_dropout() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Identity", ["x"], ["a"], name="ident"),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
        helper.make_node("Dropout", ["b"], ["c"], name="drop"),
        helper.make_node("Sigmoid", ["c"], ["y"], name="sigmoid"),
    ]
    return model(nodes, [tensor("x", [2, 5])], [tensor("y", [2, 5])], opset=13)


def test_identity_and_dropout_are_removed_and_listed():
    artifact = _compiled_matches_onnxruntime(identity_dropout())
    plan = artifact.plan
    assert plan.imported.prepared == {
        "ident": "removed: Identity passes its input through at inference",
        "drop": "removed: Dropout passes its input through at inference",
    }
    assert [p.onnx_nodes for p in plan.partitions] == [["relu", "sigmoid"]]
    text = _text(plan)
    assert "Model preparation by onnxsim" in text and "2 ONNX nodes not imported as themselves" in text
    nodes = {n["name"]: n for n in build_report(plan, "m.onnx")["nodes"]}
    assert nodes["drop"]["placement"] == "none"
    assert nodes["drop"]["detail"].startswith("before import: removed: Dropout")


@pytest.mark.parametrize("opset,ratio,training_mode", [(9, 0.5, None), (13, 0.3, None), (13, 0.5, False)])
def test_dropout_of_any_ratio_is_removed_at_inference(opset, ratio, training_mode):
    """The simplifiers remove only a ratio-0 Dropout; at inference any ratio passes its input through (the light
    zoo's SqueezeNet has one of ratio 0.5 between two convs' partitions)."""
    inputs, inits = ["b"], []
    if opset >= 12:
        inputs.append("ratio")
        inits.append(const("ratio", np.array(ratio, np.float32)))
        if training_mode is not None:
            inputs.append("training")
            inits.append(const("training", np.array(training_mode)))
    attrs = {"ratio": ratio} if opset < 12 else {}
    nodes = [helper.make_node("Relu", ["x"], ["b"], name="relu"),
             helper.make_node("Dropout", inputs, ["c"], name="drop", **attrs),
             helper.make_node("Sigmoid", ["c"], ["y"], name="sigmoid")]
    m = model(nodes, [tensor("x", [2, 5])], [tensor("y", [2, 5])], inits, opset=opset)
    artifact = _compiled_matches_onnxruntime(m)
    assert artifact.plan.imported.prepared == {"drop": "removed: Dropout passes its input through at inference"}
    assert [p.onnx_nodes for p in artifact.plan.partitions] == [["relu", "sigmoid"]]


def test_dropout_whose_mask_is_read_is_left_to_tvm():
    nodes = [helper.make_node("Dropout", ["x"], ["c", "mask"], name="drop", ratio=0.5),
             helper.make_node("Cast", ["mask"], ["m"], name="cast", to=onnx.TensorProto.FLOAT),
             helper.make_node("Add", ["c", "m"], ["y"], name="add")]
    m = model(nodes, [tensor("x", [2, 5])], [tensor("y", [2, 5])], opset=9)
    assert "drop" not in byoc.import_model(m).prepared


def test_a_model_preparation_leaves_alone_has_no_preparation_section():
    from models import small_mlp

    plan = byoc.partition(small_mlp(), ["c_source"])
    assert plan.imported.prepared == {} and plan.imported.simplifier == ""
    report = build_report(plan, "m.onnx")
    assert "prepared" not in report and "Model preparation" not in render(report, "text")


# -- rewrites named as what they did: merged, folded, a no-op -------------------------------
def linear_layer() -> onnx.ModelProto:
    """A torch Linear on rank-3 activations (MatMul + bias Add, which onnxsim merges into a Gemm between
    Reshapes), after a Reshape and before a Reshape to the shape its input already has."""
    r = rng(5)
    nodes = [
        helper.make_node("Reshape", ["x", "rows"], ["xr"], name="to_rows"),
        helper.make_node("MatMul", ["xr", "w"], ["mm"], name="matmul"),
        helper.make_node("Add", ["mm", "b"], ["h"], name="bias"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "same"], ["y"], name="keep_shape"),
    ]
    inits = [const("rows", np.array([1, 5, 8], np.int64)), const("w", r.standard_normal((8, 4)).astype(np.float32)),
             const("b", r.standard_normal(4).astype(np.float32)), const("same", np.array([1, 5, 4], np.int64))]
    return model(nodes, [tensor("x", [1, 40])], [tensor("y", [1, 5, 4])], inits, opset=13)


def test_matmul_and_add_merged_into_a_gemm_are_reported_as_merged():
    # Before: "removed: it does nothing for these shapes: matmul" and "fused into Reshape `to_rows`: bias".
    artifact = _compiled_matches_onnxruntime(linear_layer())
    plan = artifact.plan
    assert "Gemm" in {n.op_type for n in plan.imported.prepared_model.graph.node}
    assert plan.imported.prepared == {
        "matmul": "merged into a Gemm with Add `bias`",
        "bias": "merged into a Gemm with MatMul `matmul`",
        "keep_shape": "removed: a no-op for these shapes",
    }
    # The Gemm runs as the user's MatMul; the Reshape before it is still the user's Reshape.
    assert [p.onnx_nodes for p in plan.partitions] == [["to_rows", "matmul", "relu"]]
    text = _text(plan)
    assert "  merged into a Gemm with Add `bias`: matmul\n" in text
    assert "  merged into a Gemm with MatMul `matmul`: bias\n" in text
    assert "  removed: a no-op for these shapes: keep_shape" in text
    assert "does nothing" not in text and "fused into" not in text


def test_a_reshape_to_the_same_shape_is_a_no_op_and_a_real_fusion_is_not():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "same"], ["rs"], name="same_shape"),
             helper.make_node("Sigmoid", ["rs"], ["y"], name="sigmoid")]
    m = model(nodes, [tensor("x", [1, 8])], [tensor("y", [1, 8])], [const("same", np.array([1, 8], np.int64))],
              opset=13)
    assert prepare(check.check_model(m)).fate == {"same_shape": "removed: a no-op for these shapes"}
    # A BatchNormalization fused into its Conv leaves the Conv writing the tensor the BN read, like a
    # no-op would, but with other weights.
    assert prepare(check.check_model(conv_bn(9))).fate == {"bn": "fused into Conv `conv`"}


def test_nodes_merged_without_weights_are_named_with_the_node_they_became():
    # onnxsim's fuse_gelu (opset 20): Div, Erf, Add, Mul, Mul -> Gelu, which stands for the last Mul.
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"], name="div"),
             helper.make_node("Erf", ["d"], ["e"], name="erf"),
             helper.make_node("Add", ["e", "one"], ["a"], name="add"),
             helper.make_node("Mul", ["x", "a"], ["m"], name="mul"),
             helper.make_node("Mul", ["m", "half"], ["y"], name="half_of")]
    inits = [const("sqrt2", np.array(np.sqrt(2), np.float32)), const("one", np.array(1, np.float32)),
             const("half", np.array(0.5, np.float32))]
    prepared = prepare(check.check_model(model(nodes, [tensor("x", [1, 8])], [tensor("y", [1, 8])], inits,
                                                      opset=20)))
    if [n.op_type for n in prepared.model.graph.node] != ["Gelu"]:
        pytest.skip("this simplifier does not fuse Gelu")
    assert prepared.origin == {prepared.model.graph.node[0].name: "half_of"}
    merged = "merged into a Gelu with Mul `half_of` and 3 other nodes"
    assert prepared.fate == {"div": merged, "erf": merged, "add": merged, "mul": merged,
                             "half_of": "merged into a Gelu with Div `div` and 3 other nodes"}


# -- preparation never changes what the model computes ------------------------------------
def _broken(*args, **kwargs):
    raise RuntimeError("simulated simplifier crash")


def _break_onnxslim(monkeypatch):
    import onnxslim

    monkeypatch.setattr(onnxslim, "slim", _broken)


def test_onnxslim_takes_over_when_onnxsim_fails(monkeypatch):
    import onnxsim

    monkeypatch.setattr(onnxsim, "simplify", _broken)
    imported = byoc.import_model(identity_dropout())
    assert imported.simplifier.startswith("onnxslim ")
    assert imported.prepared == {"ident": "removed: Identity passes its input through at inference",
                                 "drop": "removed: Dropout passes its input through at inference"}


def test_simplifier_failure_falls_back_to_the_model_as_given(monkeypatch):
    import onnxsim

    monkeypatch.setattr(onnxsim, "simplify", _broken)
    _break_onnxslim(monkeypatch)
    with pytest.warns(UserWarning, match="onnxsim .*simulated simplifier crash; onnxslim .*simulated simplifier "
                                         "crash.*imported as given"):
        imported = byoc.import_model(identity_dropout())
    assert imported.prepared == {} and imported.simplifier == ""
    # TVM's importer leaves no binding for Identity, but imports the unfolded Dropout.
    assert {n.name for n in imported.node_of.values()} == {"relu", "drop", "sigmoid"}


def test_simplifier_that_renames_an_output_is_refused(monkeypatch):
    import onnxsim

    real = onnxsim.simplify

    def renaming(model, *args, **kwargs):
        out, ok = real(model, *args, **kwargs)
        old = out.graph.output[0].name
        for node in out.graph.node:
            node.output[:] = ["renamed" if o == old else o for o in node.output]
        out.graph.output[0].name = "renamed"
        return out, ok

    monkeypatch.setattr(onnxsim, "simplify", renaming)
    _break_onnxslim(monkeypatch)  # else the fallback simplifier serves and nothing is refused
    with pytest.warns(UserWarning, match="changed the model's input or output names"):
        artifact = byoc.compile(identity_dropout(), vendors=["c_source"])
    assert [s.name for s in artifact.plan.imported.outputs] == ["y"]
    assert artifact.plan.imported.prepared == {}


def test_simplifier_output_that_fails_the_checker_is_refused(monkeypatch):
    import onnxsim

    real = onnxsim.simplify

    def invalid(model, *args, **kwargs):
        out, ok = real(model, *args, **kwargs)
        out.graph.node[0].input[0] = "no_such_tensor"
        return out, ok

    monkeypatch.setattr(onnxsim, "simplify", invalid)
    _break_onnxslim(monkeypatch)  # else the fallback simplifier serves and nothing is refused
    with pytest.warns(UserWarning, match="fails onnx.checker"):
        imported = byoc.import_model(identity_dropout())
    assert imported.prepared == {}


def test_prepared_graph_tvm_cannot_import_falls_back_to_the_model_as_given(monkeypatch):
    real = relax_import.to_relax

    def prepared_fails(model, inputs, origin=None, op_types=None, dim_ranges=None, scope=""):
        if origin:  # the prepared graph comes with its origin map, the model as given without
            raise ModelLoadError("simulated importer failure")
        return real(model, inputs, dim_ranges=dim_ranges)

    monkeypatch.setattr(relax_import, "to_relax", prepared_fails)
    with pytest.warns(UserWarning, match="does not import .*simulated importer failure"):
        imported = byoc.import_model(identity_dropout())
    assert imported.prepared == {} and imported.simplifier == ""
    assert imported.prepared_model is imported.model
    # Both failing: the error of the prepared graph is the one raised.
    def both_fail(model, inputs, origin=None, op_types=None, dim_ranges=None, scope=""):
        raise ModelLoadError("simulated importer failure" if origin else "the model as given fails too")

    monkeypatch.setattr(relax_import, "to_relax", both_fail)
    with pytest.raises(ModelLoadError, match="simulated importer failure"):
        byoc.import_model(identity_dropout())


def test_preparation_runs_with_the_users_static_shapes():
    """A symbolic batch becomes computable only once input_shapes applies."""
    m = shape_chain()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    m.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "N"
    imported = byoc.import_model(m, input_shapes={"x": [3, 8, 4, 4]})
    assert imported.outputs[0].shape == (3, 8)
    assert imported.prepared["target"] == "folded into a constant"
    # The reference model keeps the user's names and carries the shapes given.
    assert imported.model.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 3


# -- a real model -------------------------------------------------------------------------
@pytest.mark.skipif(not os.path.isfile(os.path.join(LIGHT, "light_squeezenet.onnx")),
                    reason="the onnx package ships the light model zoo")
def test_light_squeezenet_matches_onnxruntime():
    path = os.path.join(LIGHT, "light_squeezenet.onnx")
    m = onnx.load(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # preparation must not fall back on a model zoo model
        artifact = byoc.compile(path, vendors=["c_source"])
    imported = artifact.plan.imported
    # Weights are ConstantOfShape nodes: folded; its Dropout (n61) removed; every Conv stays the user's.
    # (unnamed in the file: byoc names them, ConstantOfShape_0, ..., in its copy)
    constant_of_shape = [n.name for n in imported.model.graph.node if n.op_type == "ConstantOfShape"]
    assert constant_of_shape
    assert imported.prepared == {**{n: "folded into a constant" for n in constant_of_shape},
                                 "n61": "removed: Dropout passes its input through at inference"}
    convs = {n.name for n in m.graph.node if n.op_type == "Conv"}
    assert convs and {n.name for n in imported.node_of.values() if n.op_type == "Conv"} == convs
    inputs = {"data_0": rng(5).standard_normal((1, 3, 224, 224)).astype(np.float32)}
    got = artifact.run(inputs)[0]
    want = onnxruntime_outputs(m, inputs)[0]
    assert got.shape == want.shape
    assert np.max(np.abs(got - want)) <= 1e-3 * np.max(np.abs(want))


# -- recurrent ops are unrolled after folding (byoc.pipeline.frontend.prepare.recurrent) ------------------------------
def lstm_model() -> onnx.ModelProto:
    """A shape-folded Reshape in front of an LSTM whose hidden state feeds a Gemm."""
    r = rng(7)
    hidden, features, steps = 4, 3, 5
    f = lambda *s: (r.standard_normal(s) * 0.4).astype(np.float32)  # noqa: E731
    inits = [const("W", f(1, 4 * hidden, features)), const("R", f(1, 4 * hidden, hidden)),
             const("B", f(1, 8 * hidden)), const("fc_w", f(2, hidden)), const("fc_b", f(2)),
             const("seq_shape", np.array([steps, 1, features], np.int64))]
    nodes = [
        helper.make_node("Reshape", ["x", "seq_shape"], ["seq"], name="to_sequence"),
        helper.make_node("LSTM", ["seq", "W", "R", "B"], ["Y", "Y_h"], name="lstm", hidden_size=hidden),
        helper.make_node("Squeeze", ["Y_h", "zero"], ["h"], name="last_state"),
        helper.make_node("Gemm", ["h", "fc_w", "fc_b"], ["y"], name="fc", transB=1),
    ]
    inits.append(const("zero", np.array([0], np.int64)))
    return model(nodes, [tensor("x", [steps, features])], [tensor("y", [1, 2])], inits, opset=14)


def test_lstm_is_unrolled_and_reported_as_the_users_lstm():
    artifact = _compiled_matches_onnxruntime(lstm_model())
    imported = artifact.plan.imported
    fate = imported.prepared["lstm"]
    assert fate.startswith("decomposed into ") and int(fate.split()[2]) > 5
    lstm_ops = [b for b, n in imported.node_of.items() if n == OnnxNode("lstm", "LSTM")]
    assert len(lstm_ops) > 5  # many Relax ops, every one reported as the user's LSTM
    assert "Y" not in {n.name for n in imported.node_of.values()}
    assert f"{fate}: lstm" in _text(artifact.plan)
    plan = byoc.partition(lstm_model(), ["c_source"], keep_on_host=["LSTM"])
    lstm = [d for d in plan.decisions.values() if d.node is not None and d.node.name == "lstm"]
    assert len(lstm) > 5 and all(d.on_host for d in lstm)
    assert "kept on host by keep_on_host='LSTM'" in lstm[0].reasons["c_source"]


def _as_strided_head(stride: int = 8, offset: int = 0) -> onnx.ModelProto:
    """A classifier head as torch's dynamo exporter writes ``pooled.as_strided((batch, 8, 1, 1), (8, 1, 1, 1))``
    with a symbolic batch: GlobalAveragePool, Gather(Reshape(pooled, [-1]), Range(0, batch) * stride + arange),
    then a Flatten and a Gemm. ``stride`` other than 8, or an ``offset``, makes a Gather that is no Reshape."""
    w = rng().standard_normal((8, 4)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "k"], ["c"], name="conv"),
        helper.make_node("GlobalAveragePool", ["c"], ["pooled"], name="pool"),
        helper.make_node("Reshape", ["pooled", "minus_one"], ["flat"], name="flatten_all"),
        helper.make_node("Shape", ["x"], ["batch_1d"], name="shape", start=0, end=1),
        helper.make_node("Squeeze", ["batch_1d"], ["batch"], name="batch"),
        helper.make_node("Range", ["zero", "batch", "one"], ["rows"], name="range"),
        helper.make_node("Mul", ["rows", "stride"], ["row_starts"], name="mul"),
        helper.make_node("Unsqueeze", ["row_starts", "axes"], ["row_index"], name="unsqueeze"),
        helper.make_node("Add", ["row_index", "columns"], ["index"], name="add"),
        helper.make_node("Add", ["index", "offset"], ["index_at"], name="add_offset"),
        helper.make_node("Gather", ["flat", "index_at"], ["viewed"], name="as_strided", axis=0),
        helper.make_node("Flatten", ["viewed"], ["features"], name="flatten"),
        helper.make_node("Gemm", ["features", "w"], ["y"], name="fc"),
    ]
    inits = [const("k", rng().standard_normal((8, 3, 3, 3)).astype(np.float32)), const("w", w),
             const("minus_one", np.array([-1], np.int64)), const("zero", np.array(0, np.int64)),
             const("one", np.array(1, np.int64)), const("stride", np.array(stride, np.int64)),
             const("axes", np.array([1, 2, 3], np.int64)),
             const("columns", np.arange(8, dtype=np.int64).reshape(1, 8, 1, 1)),
             const("offset", np.full((1, 1, 1, 1), offset, np.int64))]
    return model(nodes, [tensor("x", ["batch", 3, 6, 6])], [tensor("y", ["batch", 4])], inits)


def test_a_dynamo_as_strided_view_of_a_whole_tensor_is_a_reshape_and_joins_the_partition():
    m = _as_strided_head()
    plan = byoc.partition(m, ["dnnl"])
    assert len(plan.partitions) == 1 and not plan.host_ops, plan
    assert plan.imported.prepared["as_strided"] == "an as_strided view of the whole tensor: a Reshape to [-1, 8, 1, 1]"
    assert plan.imported.prepared["range"] == "the index of an as_strided view, no longer computed"
    artifact = byoc.build(plan)
    for batch in (1, 3):
        x = rng(batch).standard_normal((batch, 3, 6, 6)).astype(np.float32)
        np.testing.assert_allclose(artifact.run({"x": x})[0], onnxruntime_outputs(m, {"x": x})[0], rtol=1e-5,
                                   atol=1e-5)


@pytest.mark.parametrize("stride, offset", [(16, 0), (8, 1)])
def test_an_as_strided_gather_that_is_no_whole_view_stays_a_gather(stride, offset):
    """Rows 16 apart skip half the tensor, and an offset starts inside it: neither is a Reshape."""
    m = _as_strided_head(stride, offset)
    plan = byoc.partition(m, ["dnnl"])
    assert "as_strided" not in plan.imported.prepared
    assert any(h.node is not None and h.node.name == "as_strided" for h in plan.host_nodes)
