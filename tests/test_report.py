"""byoc.tools.report, byoc.tools.memory and byoc.tools.onnx_export on the small CLI models.

References are independent of byoc: the JSON Schema validator, onnx.checker,
onnxruntime, and sizes worked out by hand from the model definitions.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import byoc
from byoc.tools.memory import estimate_memory
from byoc.tools.onnx_export import partitioned_model
from byoc.tools.report import FORMATS, REPORT_SCHEMA, SCHEMA_VERSION, build_report, render

from cli_models import small_cnn, small_mlp


@pytest.fixture(scope="module")
def cnn_plan():
    return byoc.partition(small_cnn(), ["c_source"])


def _report(plan, **kwargs):
    return build_report(plan, "model.onnx", memory=estimate_memory(plan).as_dict(), **kwargs)


def test_json_matches_schema_and_version(cnn_plan):
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema validates the report schema")
    report = json.loads(render(_report(cnn_plan), "json"))
    jsonschema.validate(report, REPORT_SCHEMA)
    assert report["schema_version"] == SCHEMA_VERSION


def test_summary_counts_onnx_nodes_and_ops(cnn_plan):
    summary = _report(cnn_plan)["summary"]
    # 8 ONNX nodes; Conv and Gemm each import as two ops (conv/matmul + add).
    assert summary["onnx_nodes"] == 8
    assert summary["total_ops"] == 11
    assert summary["host_ops"] == 1
    assert summary["offloaded_ops"] == {"c_source": 10}


def test_host_ops_grouped_by_op_type_and_reason():
    plan = byoc.partition(small_cnn(), ["c_source"], keep_on_host=["Relu"])
    groups = _report(plan)["host_ops"]
    relu = [g for g in groups if g["op_type"] == "Relu"]
    assert len(relu) == 1 and relu[0]["nodes"] == ["relu1", "relu2"]
    assert "keep_on_host='Relu'" in relu[0]["reasons"]["c_source"]
    text = render(_report(plan), "text")
    assert "Relu: 2 nodes — c_source: kept on host by keep_on_host='Relu'" in text


def test_reports_use_onnx_names_not_relax_bindings(cnn_plan):
    report = _report(cnn_plan)
    bindings = {b for b in cnn_plan.decisions} - {n.name for n in small_cnn().graph.node}
    for fmt in FORMATS:
        out = render(report, fmt)
        for binding in bindings:
            assert f"'{binding}'" not in out and f'"{binding}"' not in out, (fmt, binding)


def test_memory_lower_bound_by_hand(cnn_plan):
    estimate = estimate_memory(cnn_plan)
    # Host program: c_source_0 -> batch_norm -> c_source_1. At batch_norm both its
    # input and output (1x8x8x8 float32 each) are live; nothing else is.
    assert estimate.lower_bound_bytes == 2 * 8 * 8 * 8 * 4
    assert estimate.planned_bytes >= estimate.lower_bound_bytes


def test_memory_all_on_host_is_at_least_the_bound():
    plan = byoc.partition(small_mlp(), [])
    estimate = estimate_memory(plan)
    assert 0 < estimate.lower_bound_bytes <= estimate.planned_bytes


def test_memory_of_a_host_program_calling_an_imported_tir_kernel():
    """TVM imports a reflect Pad as a PrimFunc of its own (mirror_pad) that main calls; the estimate keeps it."""
    from onnx import TensorProto, helper

    pads = helper.make_tensor("pads", TensorProto.INT64, [4], [0, 2, 0, 2])
    graph = helper.make_graph(
        [helper.make_node("Pad", ["x", "pads"], ["p"], name="pad", mode="reflect"),
         helper.make_node("Relu", ["p"], ["y"], name="relu")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], [pads])
    plan = byoc.partition(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), ["c_source"])
    assert [d.op for d in plan.host_ops] == ["call_tir(mirror_pad)"]
    estimate = estimate_memory(plan)
    # The padded tensor and the relu's output (10 floats each) are live together.
    assert estimate.lower_bound_bytes == 2 * 10 * 4
    assert estimate.planned_bytes >= estimate.lower_bound_bytes


def _elementwise_chain():
    """x -> Relu -> Sigmoid -> Tanh -> y on [2, 5]: two intermediates of 40 bytes each."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"), helper.make_node("Sigmoid", ["a"], ["b"], name="sig"),
             helper.make_node("Tanh", ["b"], ["y"], name="tanh")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("vendor", ["c_source", "json_runtime"])
def test_runtime_memory_of_a_chain_is_its_two_intermediates(vendor):
    artifact = byoc.compile(_elementwise_chain(), [vendor])
    assert {name: (m.workspace_bytes, m.constant_bytes) for name, m in artifact.runtime_memory.items()} == \
        {f"{vendor}_0": (2 * 10 * 4, 0)}


def test_runtime_memory_of_dnnl_holds_the_reordered_weights_and_reaches_the_report():
    plan = byoc.partition(small_cnn(), ["dnnl"])
    artifact = byoc.build(plan)
    weights = sum(onnx.numpy_helper.to_array(i).nbytes for i in small_cnn().graph.initializer)
    [(name, use)] = artifact.runtime_memory.items()
    assert name == "dnnl_0" and use.workspace_bytes > 0 and use.constant_bytes >= weights
    estimate = estimate_memory(plan)
    assert estimate.runtimes is None and estimate.total_planned_bytes is None
    built = estimate.with_runtimes(artifact.plan, artifact.runtime_memory)
    assert built.total_planned_bytes == estimate.planned_bytes + use.workspace_bytes
    report = build_report(plan, "model.onnx", memory=built.as_dict())
    assert report["memory"]["runtimes"] == [
        {"partition": "dnnl_0", "vendor": "dnnl", "workspace_bytes": use.workspace_bytes,
         "constant_bytes": use.constant_bytes, "model_constant_bytes": use.model_constant_bytes,
         "device_bytes": None}]
    assert 0.9 * weights < use.model_constant_bytes <= weights  # the partition's constants (a bias folded away)
    text = render(report, "text")
    assert f"dnnl_0 (dnnl)      {use.workspace_bytes} bytes" in text and "planned in all" in text


def test_runtime_memory_survives_export_and_load(tmp_path):
    artifact = byoc.compile(_elementwise_chain(), ["json_runtime"])
    loaded = byoc.load(artifact.export(tmp_path / "m.so"))
    assert loaded.runtime_memory == artifact.runtime_memory


def test_a_codegen_whose_memory_report_fails_still_builds():
    from byoc.codegens.c_source import CSourceCodegen
    from byoc.vendor import OpRule, Vendor, always, register_vendor, unregister_vendor

    class Failing(CSourceCodegen):
        def runtime_memory(self, partitions, modules):
            raise RuntimeError("no idea")

    register_vendor(Vendor("memless", (OpRule("memless.relu", "relax.nn.relu", always),), Failing()))
    try:
        with pytest.warns(RuntimeWarning, match="'memless' could not report its runtime memory: RuntimeError: no idea"):
            artifact = byoc.compile(_elementwise_chain(), ["memless"])
    finally:
        unregister_vendor("memless")
    assert artifact.runtime_memory == {} and len(artifact.plan.partitions) == 1


def test_model_lower_bound_does_not_depend_on_the_split():
    bounds = {estimate_memory(byoc.partition(small_cnn(), vendors)).model_lower_bound_bytes
              for vendors in ([], ["c_source"], ["dnnl"])}
    assert len(bounds) == 1 and bounds.pop() > 0


@pytest.mark.parametrize("build, keep", [(small_cnn, []), (small_cnn, ["bn1", "relu1"]), (small_mlp, ["act1"])])
def test_exported_onnx_checks_and_matches_onnxruntime(build, keep):
    model = build()
    plan = byoc.partition(model, ["c_source"], keep_on_host=keep)
    exported = partitioned_model(plan)
    onnx.checker.check_model(exported, full_check=True)
    calls = [n for n in exported.graph.node if n.domain.startswith("byoc.")]
    assert [n.op_type for n in calls] == [p.name for p in plan.partitions]
    assert {f.name for f in exported.functions} == {p.name for p in plan.partitions}
    assert all(n.domain == "byoc.c_source" for n in calls)
    spec = plan.imported.inputs[0]
    x = np.random.default_rng(3).standard_normal(spec.shape).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {spec.name: x})
    got = ort.InferenceSession(exported.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {spec.name: x})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)


def test_html_escapes_names():
    model = small_mlp()
    model.graph.node[2].name = "<act&1>"
    plan = byoc.partition(model, ["c_source"])
    page = render(_report(plan), "html")
    assert "<act&1>" not in page and "&lt;act&amp;1&gt;" in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in page


def test_unknown_format_is_a_byoc_error(cnn_plan):
    with pytest.raises(byoc.ByocError, match="choose one of"):
        render(_report(cnn_plan), "yaml")


def test_export_warns_about_a_node_split_across_partitions_and_still_computes_the_same():
    """A Gemm imports as matmul + add; a vendor that takes only matmul splits the node in two."""
    from byoc.codegens.c_source import CSourceCodegen
    from byoc.vendor import OpRule, Vendor

    matmul_only = Vendor("mm_only", (OpRule("mm_only.matmul", "relax.matmul"),), CSourceCodegen())
    model = small_cnn()
    plan = byoc.partition(model, [matmul_only, "c_source"])
    fc_parts = [p.name for p in plan.partitions if "fc1" in p.onnx_nodes]
    assert len(fc_parts) == 2 and fc_parts[0].startswith("mm_only"), fc_parts
    with pytest.warns(RuntimeWarning, match=rf"stay plain nodes in the exported model \(an ONNX node cannot be "
                                            rf"cut\): fc1 \({fc_parts[0]} \+ {fc_parts[1]}\); partitions with no "
                                            rf"whole node, so absent from the file: {fc_parts[0]}"):
        exported = partitioned_model(plan)
    assert "fc1" in [n.name for n in exported.graph.node]  # the plain node, not lost
    inputs = {"x": np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    want = ort.InferenceSession(model.SerializeToString()).run(None, inputs)
    got = ort.InferenceSession(exported.SerializeToString()).run(None, inputs)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)


def _torch_names(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every tensor and node named as torch's exporter names them, 60+ characters each."""
    initializers = {t.name for t in model.graph.initializer}
    prefix = "/features/stage1/block1.0"
    long = {}
    for node in model.graph.node:
        for name in node.output:
            long[name] = f"{prefix}/{node.name}/{node.op_type}_output_0_of_the_{node.name}_layer"
        node.name = f"{prefix}/{node.name}/{node.op_type}"
    long["x"] = "input_images_in_nchw_layout_as_the_dataloader_gives_them_to_the_model"
    for node in model.graph.node:
        node.input[:] = [long.get(n, n) if n not in initializers else n for n in node.input]
        node.output[:] = [long[n] for n in node.output]
    for vi in [*model.graph.input, *model.graph.output, *model.graph.value_info]:
        vi.name = long.get(vi.name, vi.name)
    return model


def test_text_report_lines_stay_within_120_characters_with_torch_names():
    # Before: the partition table's rows were 260 characters (inputs and outputs in the table).
    plan = byoc.partition(_torch_names(small_cnn()), ["c_source"])
    # Without the memory section: its explanations are fixed text, as README.md shows it.
    report = build_report(plan, "model.onnx")
    boundary = [t["name"] for p in report["partitions"] for t in p["inputs"] + p["outputs"]]
    assert len(plan.partitions) == 2 and min(len(name) for name in boundary) >= 60
    text = render(report, "text")
    assert max(len(line) for line in text.splitlines()) <= 120, text
    # Each partition's tensors on lines of their own, long names shortened in the middle ...
    first = report["partitions"][0]
    line = next(line for line in text.splitlines() if line.startswith(f"  {first['name']} inputs: "))
    assert "…" in line and line.endswith(" 1x3x8x8 float32")
    name = first["inputs"][0]["name"]
    assert line.split(": ", 1)[1].startswith(name[:20]) and name[-20:] + " 1x3x8x8" in line
    # ... and whole in JSON and HTML.
    assert json.loads(render(report, "json"))["partitions"][0]["inputs"][0]["name"] == name
    assert name in render(report, "html")
    # Node names are not cut: lists of them wrap.
    assert all(n in text for p in report["partitions"] for n in p["onnx_nodes"])


def test_a_table_that_fits_keeps_the_tensors_in_it(cnn_plan):
    text = render(_report(cnn_plan), "text")
    assert "  name        vendor    nodes  ops  inputs              outputs" in text
    assert " inputs: " not in text


def _split_model(halves_out: bool = False) -> onnx.ModelProto:
    """Relu -> Split into 3 + 5 -> Erf of the first half, Sigmoid of the second; the Relu's, the Erf's and
    the Sigmoid's results are the model's outputs. With ``halves_out``, the halves are the outputs."""
    from onnx import helper

    from models import const, model, tensor

    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Split", ["r", "sizes"], ["a", "b"], name="split", axis=1)]
    outputs = [tensor("a", [1, 3]), tensor("b", [1, 5])]
    if not halves_out:
        nodes += [helper.make_node("Erf", ["a"], ["ya"], name="erf"),
                  helper.make_node("Sigmoid", ["b"], ["sb"], name="sigmoid")]
        outputs = [tensor("ya", [1, 3]), tensor("sb", [1, 5]), tensor("r", [1, 8])]
    return model(nodes, [tensor("x", [1, 8])], outputs, [const("sizes", np.array([3, 5], np.int64))])


def _splitter():
    from byoc.codegens.c_source import CSourceCodegen
    from byoc.vendor import OpRule, Vendor

    return Vendor("splitter", (OpRule("splitter.relu", "relax.nn.relu"), OpRule("splitter.split", "relax.split"),
                               OpRule("splitter.sigmoid", "relax.sigmoid")), CSourceCodegen())


def test_partition_outputs_are_the_models_tensors_when_a_split_is_inside():
    # Before: "splitter_0:0", "splitter_0:1" for the halves (read through bindings with no decision of
    # their own, so the partition's outputs were not matched to tensors) ...
    (part,) = _report(byoc.partition(_split_model(halves_out=True), [_splitter()]))["partitions"]
    assert [(t["name"], t["shape"]) for t in part["outputs"]] == [("a", [1, 3]), ("b", [1, 5])]
    # ... and "r", "split", "sb" here: matched in the model's order, not in the partition's.
    report = _report(byoc.partition(_split_model(), [_splitter()]))
    (part,) = report["partitions"]
    assert part["onnx_nodes"] == ["relu", "split", "sigmoid"]
    assert [(t["name"], t["shape"]) for t in part["outputs"]] == [("a", [1, 3]), ("sb", [1, 5]), ("r", [1, 8])]
    assert "splitter_0:" not in render(report, "text")


def test_a_host_splits_halves_are_named_as_the_model_names_them():
    # Before: c_source_1 read "sigmoid" (the node reading the half), not the Split's output "b".
    report = _report(byoc.partition(_split_model(), ["c_source"]))
    assert [([t["name"] for t in p["inputs"]], p["onnx_nodes"], [t["name"] for t in p["outputs"]])
            for p in report["partitions"]] == [(["x"], ["relu"], ["r"]), (["b"], ["sigmoid"], ["sb"])]
