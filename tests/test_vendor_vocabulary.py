"""One vocabulary for vendors: checks read the op calls codegens read, rule names get the vendor's prefix, and
every vendor (byoc's own too) is published as an entry point."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from importlib import metadata

import numpy as np
import pytest
from onnx import helper

import byoc
from byoc.codegens.c_source import CSourceCodegen
from byoc.errors import UnknownVendorError, VendorError
from byoc.vendor import SUPPORTED, OpRule, PatternRule, Vendor, registry
from byoc.vendor.checks import all_of, dims, dtypes, scalar, static_shape, static_shapes
from byoc.vendor.graph import partition_graph
from byoc.vendor.quantized import qdq_rules, qdq_supported

from models import const, model, single_op, tensor


def _conv(out_ch: int = 8, in_ch: int = 8, kernel: int = 3, weight: float = 1.0, batch="1"):
    w = const("w", np.full((out_ch, in_ch, kernel, kernel), weight, np.float32))
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[kernel // 2] * 4)
    b = int(batch) if batch.isdigit() else batch
    return model([node], [tensor("x", [b, in_ch, 8, 8])], [tensor("y", [b, out_ch, 8, 8])], [w])


def _decisions(onnx_model, vendor):
    plan = byoc.partition(onnx_model, vendors=[vendor])
    return plan, {d.node.name: (d.rule, d.reasons.get(vendor.name)) for d in plan.decisions.values()}


# -- checks read plain op calls ----------------------------------------------------------------
def _conv_limits(match):
    """kernel <= 3x3, 8 output channels, a positive weight, a static batch."""
    conv = match.op
    if conv.op != "relax.nn.conv2d" or conv.attrs["data_layout"] != "NCHW":
        return f"not an NCHW conv: {conv.op} {conv.attrs.get('data_layout')}"
    weight = conv.inputs[1]
    if weight.kind != "const" or weight.dtype != "float32":
        return "weight must be a float32 constant"
    out_ch, _, kh, kw = weight.shape
    if (kh, kw) > (3, 3):
        return f"kernel {kh}x{kw} > 3x3"
    if out_ch != 8 or conv.output.shape[1] != 8:
        return f"{out_ch} output channels"
    if weight.data.min() <= 0:
        return f"weight {weight.data.min():g} <= 0"
    if static_shape(conv.inputs[0]) is None:
        return f"batch {conv.inputs[0].shape[0]!r} is symbolic ({', '.join(conv.inputs[0].dim_names)})"
    return SUPPORTED


PLAIN = Vendor("plain", (OpRule("conv2d", "relax.nn.conv2d", _conv_limits),), CSourceCodegen())


@pytest.mark.parametrize("onnx_model, reason", [
    (_conv(), None),
    (_conv(kernel=5), "kernel 5x5 > 3x3"),
    (_conv(out_ch=16), "16 output channels"),
    (_conv(weight=-0.5), "weight -0.5 <= 0"),
    (_conv(batch="N"), "batch 'N' is symbolic (N)"),
], ids=["taken", "kernel", "channels", "weight-data", "symbolic"])
def test_a_check_on_the_plain_view_accepts_and_refuses(onnx_model, reason):
    _, decisions = _decisions(onnx_model, PLAIN)
    assert decisions == {"conv": ("plain.conv2d" if reason is None else None, reason)}


def _conv_bias_relu():
    from tvm.relax.dpl import is_const, is_op, wildcard

    conv = is_op("relax.nn.conv2d")(wildcard(), wildcard())
    bias = is_const()
    return is_op("relax.nn.relu")(is_op("relax.add")(conv, bias)), {"conv": conv, "bias": bias, "x": wildcard()}


def _bias_small(match):
    """a bias of one value per channel, each < 1; stride 1."""
    conv, bias = match.call("conv"), match.tensor("bias")
    assert match.call("bias") is None and match.call("nothing") is None and set(match.names) >= {"conv", "bias"}
    if conv.attrs["strides"] != (1, 1):
        return f"strides {conv.attrs['strides']}"
    if bias.shape != (1, match.tensor("conv").shape[1], 1, 1) or bias.data.max() >= 1:
        return f"bias {bias.shape} up to {bias.data.max():g}"
    assert sorted(c.op for c in match.ops) == ["relax.add", "relax.nn.conv2d", "relax.nn.relu"]
    assert match.ops_of("relax.add")[0].inputs[1] is bias  # one tensor, however it is reached
    return SUPPORTED


def _conv_bias_relu_model(bias: float):
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    inits = [const("w", np.ones((8, 8, 3, 3), np.float32)), const("b", np.full(8, bias, np.float32))]
    return model(nodes, [tensor("x", [1, 8, 8, 8])], [tensor("y", [1, 8, 8, 8])], inits)


@pytest.mark.parametrize("bias, reason", [(0.5, None), (2.0, "bias (1, 8, 1, 1) up to 2")])
def test_a_pattern_check_reads_its_annotated_parts(bias, reason):
    vendor = Vendor("parts", (PatternRule("conv_bias_relu", _conv_bias_relu, _bias_small),), CSourceCodegen())
    _, decisions = _decisions(_conv_bias_relu_model(bias), vendor)
    rule = None if reason else "parts.conv_bias_relu"
    assert decisions == {"conv": (rule, reason or None), "relu": (rule, reason or None)}


def test_the_op_call_a_check_sees_is_the_one_the_codegen_gets():
    seen = []

    def record(match):
        seen.append(match.op)
        return SUPPORTED

    vendor = Vendor("same", (OpRule("conv2d", "relax.nn.conv2d", record),), CSourceCodegen())
    plan = byoc.partition(_conv(weight=0.25), vendors=[vendor])
    (part,) = plan.partitions
    (compiled,) = partition_graph(plan.mod[part.global_var], part.name).ops
    checked = seen[-1]
    assert (checked.op, checked.rule) == (compiled.op, compiled.rule) == ("relax.nn.conv2d", "same.conv2d")
    assert checked.attrs == compiled.attrs
    assert [(t.shape, t.dtype, t.kind) for t in checked.inputs] == [(t.shape, t.dtype, t.kind) for t in compiled.inputs]
    assert (checked.output.shape, checked.output.dtype) == (compiled.output.shape, compiled.output.dtype)
    np.testing.assert_array_equal(checked.inputs[1].data, compiled.inputs[1].data)


def test_symbolic_dims_read_as_text_in_a_check():
    seen = []

    def record(match):
        seen.append([(dims(t), static_shape(t), t.dim_names) for t in match.tensors])
        return SUPPORTED

    vendor = Vendor("sym", (OpRule("relu", "relax.nn.relu", record),), CSourceCodegen())
    byoc.partition(single_op("Relu", {"x": ["batch", 4]}, ["batch", 4]), vendors=[vendor])
    assert seen[-1] == [(("batch", 4), None, ["batch"])] * 2


def test_the_shared_checks_work_on_the_view():
    check = all_of(dtypes("float32"), static_shapes(4))
    vendor = Vendor("shared", (OpRule("relu", "relax.nn.relu", check),), CSourceCodegen())
    _, taken = _decisions(single_op("Relu", {"x": [2, 4]}, [2, 4]), vendor)
    _, dynamic = _decisions(single_op("Relu", {"x": ["n", 4]}, ["n", 4]), vendor)
    _, rank = _decisions(single_op("Relu", {"x": [1] * 5}, [1] * 5), vendor)
    assert taken == {"relu_node": ("shared.relu", None)}
    assert dynamic == {"relu_node": (None, "dim 'n' is dynamic (static shapes only)")}
    assert rank == {"relu_node": (None, "rank 5 > 4 not supported")}


def test_scalar_reads_one_element_constants_only():
    seen = []

    def record(match):
        seen.append([scalar(t) for t in match.op.inputs])
        return SUPPORTED

    vendor = Vendor("sc", (OpRule("add", "relax.add", record),), CSourceCodegen())
    m = single_op("Add", {"x": [2, 3]}, [2, 3], initializers=[const("c", np.array([1.5], np.float32))])
    byoc.partition(m, vendors=[vendor])
    assert seen[-1] == [None, 1.5]


# -- rule names are prefixed by the vendor --------------------------------------------------------
def test_rule_names_get_the_vendor_prefix_and_a_prefixed_name_is_kept():
    vendor = Vendor("acme", (OpRule("relu", "relax.nn.relu"), OpRule("acme.sigmoid", "relax.sigmoid")),
                    CSourceCodegen())
    assert [r.name for r in vendor.rules] == ["acme.relu", "acme.sigmoid"]
    plan = byoc.partition(single_op("Relu", {"x": [2]}, [2]), vendors=[vendor])
    assert [p.rules for p in plan.partitions] == [["acme.relu"]]


@pytest.mark.parametrize("rules, message", [
    ((OpRule("other.relu", "relax.nn.relu"),), "rule name 'other.relu' must be a name such as 'conv2d'"),
    ((OpRule("re lu", "relax.nn.relu"),), "rule name 're lu'"),
    ((OpRule("relu", "relax.nn.relu"), OpRule("acme.relu", "relax.nn.relu")), "rule 'acme.relu' is defined twice"),
], ids=["other-vendor", "not-a-name", "twice"])
def test_rule_names_the_vendor_cannot_own_are_refused(rules, message):
    with pytest.raises(VendorError, match=message):
        Vendor("acme", rules, CSourceCodegen())


def test_qdq_rules_are_prefixed_by_the_vendor_and_the_old_form_still_names_them_the_same():
    new = Vendor("probe", qdq_rules(qdq_supported, ops=("relax.add",)), CSourceCodegen())
    old = Vendor("probe", qdq_rules("probe", qdq_supported, ops=("relax.add",)), CSourceCodegen())
    positional = Vendor("probe", qdq_rules("probe", qdq_supported, ("relax.add",)), CSourceCodegen())
    assert [r.name for r in new.rules] == [r.name for r in old.rules] == [r.name for r in positional.rules] == [
        "probe.qadd", "probe.quantize", "probe.dequantize"]


def test_builtin_rule_names_are_the_vendors():
    for name in ("c_source", "json_runtime", "dnnl"):
        rules = byoc.get_vendor(name).rules
        assert rules and all(r.name.startswith(f"{name}.") and r.name.count(".") == 1 for r in rules)


# -- one registration path ------------------------------------------------------------------------
@pytest.fixture
def fresh_registry():
    yield registry.REGISTRY
    registry.REGISTRY.reset()


def test_builtin_vendors_are_entry_points_like_any_vendor_package(fresh_registry):
    entries = {e.name: e for e in fresh_registry.entry_points()}
    for name in ("c_source", "json_runtime", "dnnl"):
        assert entries[name].group == "byoc.vendors"
        assert entries[name].load() is byoc.get_vendor(name)


def test_importing_a_vendor_module_registers_nothing_its_entry_point_does():
    script = textwrap.dedent("""
        from byoc.vendor import registry
        registry.REGISTRY.builtin, registry.REGISTRY.group = (), "byoc.no_such_group"
        import byoc.annotations.c_source, byoc.annotations.json_runtime, byoc.annotations.dnnl
        import byoc
        print(byoc.list_vendors())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n"


def test_a_broken_builtin_entry_point_is_reported_as_a_plugin_is(fresh_registry, monkeypatch):
    broken = metadata.EntryPoint("gone", "byoc.annotations.no_such_vendor:VENDOR", "byoc.vendors")
    monkeypatch.setattr(fresh_registry, "builtin", (*registry.BUILTIN_ENTRY_POINTS, broken))
    fresh_registry.reset()
    with pytest.warns(RuntimeWarning, match=r"entry point 'gone' \(byoc.annotations.no_such_vendor:VENDOR\)"):
        names = byoc.list_vendors()
    assert {"c_source", "json_runtime", "dnnl"} <= set(names) and "gone" not in names
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UnknownVendorError, match="vendor 'gone' could not be loaded"):
            byoc.get_vendor("gone")
