"""Vendor options: declared on the codegen, given to a build, resolved, stored in the artifact, reported.

A codegen declares ``VendorOption``s; a build resolves each (default < the
Vendor's ``options`` < ``vendor_options`` < the option's environment
variable), hands the values to ``compile`` and stores them in the artifact's
metadata; the report shows those that are not their defaults. The dnnl
codegen writes its options into each partition's graph JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from onnx import helper

import byoc
from byoc.codegens.c_source import CSourceCodegen
from byoc.codegens.dnnl import DnnlCodegen
from byoc.codegens.json_runtime import JsonRuntimeCodegen, serialize
from byoc.errors import VendorError, VendorOptionError
from byoc.vendor.options import vendor_option_settings
from byoc.tools.report import build_report, render
from byoc.vendor import OpRule, OptionSetting, Vendor, VendorOption
from byoc.vendor.graph import partition_graph

from models import const, model, onnxruntime_outputs, single_op, small_cnn, tensor

GRAPH_OPTIONS = ('"options":{"contention_watch":{"type":"bool","value":true},"shape_cache":{"type":"int","value":8},'
                 '"winograd":{"type":"bool","value":true}}')


class Recording(CSourceCodegen):
    """The C-source codegen with three options; keeps the options each compile received."""

    declared_options = (
        VendorOption("unroll", int, 4, "how many times loops are unrolled"),
        VendorOption("fast_math", bool, False, "approximate exp", env="BYOC_TEST_FAST_MATH"),
        VendorOption("layout", str, "nchw", "activation layout", choices=("nchw", "nhwc")),
    )

    def __init__(self):
        self.received = []

    def compile(self, partitions, options):
        self.received.append(dict(options))
        return super().compile(partitions, options)


def _vendor(options=None):
    return Vendor("rec", (OpRule("rec.relu", "relax.nn.relu"),), Recording(), options=options or {})


def _relu():
    return single_op("Relu", {"x": [2, 3]}, [2, 3])


@pytest.fixture(autouse=True)
def _no_overrides(monkeypatch):
    for name in ("BYOC_TEST_FAST_MATH", "BYOC_DNNL_WINOGRAD", "BYOC_DNNL_CONTENTION"):
        monkeypatch.delenv(name, raising=False)


# -- resolution and the codegen ------------------------------------------------------------------
def test_the_codegen_gets_every_declared_option_defaults_then_vendor_then_build():
    vendor = _vendor({"unroll": 8, "layout": "nhwc"})
    artifact = byoc.compile(_relu(), [vendor], vendor_options={"rec": {"layout": "nchw", "fast_math": True}})
    assert vendor.codegen.received == [{"unroll": 8, "fast_math": True, "layout": "nchw"}]
    assert artifact.vendor_options == {"rec": {"unroll": 8, "fast_math": True, "layout": "nchw"}}
    assert artifact.vendor_option_settings["rec"] == {
        "unroll": OptionSetting(8, 4, "vendor"), "fast_math": OptionSetting(True, False, "build"),
        "layout": OptionSetting("nchw", "nchw", "build")}


def test_build_of_a_plan_takes_vendor_options_too():
    vendor = _vendor()
    plan = byoc.partition(_relu(), [vendor])
    byoc.build(plan, vendor_options={"rec": {"unroll": 2}})
    byoc.build(plan)
    assert vendor.codegen.received == [{"unroll": 2, "fast_math": False, "layout": "nchw"},
                                       {"unroll": 4, "fast_math": False, "layout": "nchw"}]


def test_a_codegen_without_declared_options_gets_the_vendors_options_as_they_are():
    class Plain(CSourceCodegen):
        def compile(self, partitions, options):
            self.received = dict(options)
            return super().compile(partitions, options)

    codegen = Plain()
    artifact = byoc.compile(_relu(), [Vendor("plain", (OpRule("plain.relu", "relax.nn.relu"),), codegen,
                                             options={"anything": object})])
    assert codegen.received == {"anything": object} and artifact.vendor_options == {}
    with pytest.raises(VendorOptionError, match="vendor 'plain' has no option 'x'; it declares no options"):
        byoc.compile(_relu(), [Vendor("plain", (OpRule("plain.relu", "relax.nn.relu"),), codegen)],
                     vendor_options={"plain": {"x": 1}})


# -- errors -------------------------------------------------------------------------------------
@pytest.mark.parametrize("given, message", [
    ({"rec": {"unrol": 2}}, r"vendor 'rec' has no option 'unrol'; its options are fast_math, layout, unroll"),
    ({"rec": {"unroll": "2"}}, r"vendor 'rec' option 'unroll' takes an int, got '2'"),
    ({"rec": {"unroll": True}}, r"vendor 'rec' option 'unroll' takes an int, got True"),
    ({"rec": {"fast_math": "off"}}, r"vendor 'rec' option 'fast_math' takes on or off \(True or False\), got 'off'"),
    ({"rec": {"layout": "nwc"}}, r"vendor 'rec' option 'layout' takes one of nchw, nhwc, got 'nwc'"),
    ({"rc": {"unroll": 2}}, r"vendor_options names vendor 'rc', which is not among this build's vendors \(rec\)"),
    ({"rec": ["unroll"]}, r"the options for vendor 'rec' must be a mapping"),
], ids=["unknown-name", "str-for-int", "bool-for-int", "str-for-bool", "not-a-choice", "unknown-vendor", "not-a-map"])
def test_unknown_names_and_bad_values_are_typed_errors_naming_vendor_option_and_choices(given, message):
    vendor = _vendor()
    with pytest.raises(VendorOptionError, match=message) as caught:
        byoc.compile(_relu(), [vendor], vendor_options=given)
    assert isinstance(caught.value, (VendorError, ValueError)) and caught.value.vendor in ("rec", "rc")
    assert vendor.codegen.received == []  # refused before anything was built


def test_the_vendors_own_options_are_checked_when_it_is_made():
    with pytest.raises(VendorOptionError, match="vendor 'rec' has no option 'unroll_by'"):
        _vendor({"unroll_by": 2})
    with pytest.raises(VendorOptionError, match="vendor 'rec' option 'layout' takes one of nchw, nhwc"):
        _vendor({"layout": "chw"})


@pytest.mark.parametrize("make, message", [
    (lambda: VendorOption("n", int, "4"), "option 'n': default '4' is not an int"),
    (lambda: VendorOption("n", list, []), "option 'n': type .* is not one of bool, int, float, str"),
    (lambda: VendorOption("not a name", int, 1), "option name 'not a name' must be an identifier"),
    (lambda: type("Twice", (Recording,), {"declared_options": (VendorOption("a", int, 1), VendorOption("a", int, 2))}),
     "option 'a' is declared twice"),
    (lambda: type("Wrong", (Recording,), {"declared_options": {"a": 1}}), "declared_options must be a tuple"),
    (lambda: type("Misnamed", (Recording,), {"options": (VendorOption("a", int, 1),)}),
     "has 'options', which is not part of the codegen interface but looks like the capability 'declared_options'"),
], ids=["bad-default", "bad-type", "bad-name", "declared-twice", "not-a-tuple", "declared-as-options"])
def test_declarations_are_checked(make, message):
    with pytest.raises(VendorError, match=message):
        made = make()
        if isinstance(made, type):
            Vendor("rec", (), made())


def test_float_options_take_ints_and_the_cli_spelling_parses():
    option = VendorOption("scale", float, 1)
    assert option.default == 1.0 and isinstance(option.default, float) and option.parse("0.5", "v") == 0.5
    switch = VendorOption("on", bool, True)
    assert [switch.parse(t, "v") for t in ("on", "off", "True", "false")] == [True, False, True, False]
    with pytest.raises(VendorOptionError, match="vendor 'v' option 'on' takes on or off"):
        switch.parse("maybe", "v")


# -- the environment ---------------------------------------------------------------------------
def test_an_environment_variable_overrides_and_is_recorded(monkeypatch):
    monkeypatch.setenv("BYOC_TEST_FAST_MATH", "on")
    vendor = _vendor({"fast_math": False})
    artifact = byoc.compile(_relu(), [vendor], vendor_options={"rec": {"fast_math": False}})
    assert vendor.codegen.received[0]["fast_math"] is True
    setting = artifact.vendor_option_settings["rec"]["fast_math"]
    assert setting == OptionSetting(True, False, "environment", "BYOC_TEST_FAST_MATH=on from the environment")
    report = build_report(artifact.plan, "m.onnx", vendor_options=artifact.vendor_option_settings)
    assert report["vendor_options"] == {"rec": {"fast_math": {
        "value": True, "default": False, "source": "environment",
        "note": "BYOC_TEST_FAST_MATH=on from the environment"}}}
    assert "vendor options: rec.fast_math=on (BYOC_TEST_FAST_MATH=on from the environment)\n" in render(report, "text")


def test_a_bad_environment_value_is_named(monkeypatch):
    monkeypatch.setenv("BYOC_DNNL_WINOGRAD", "maybe")
    with pytest.raises(VendorOptionError, match="BYOC_DNNL_WINOGRAD=maybe is neither on nor off; unset it or choose "
                                                "one \\(it sets vendor 'dnnl' option 'winograd'\\)"):
        vendor_option_settings([byoc.get_vendor("dnnl")])


# -- the report -------------------------------------------------------------------------------
def test_the_report_shows_only_options_that_are_not_their_defaults():
    vendor = _vendor({"unroll": 4})  # the default, chosen: nothing to show
    plan = byoc.partition(_relu(), [vendor])
    default = build_report(plan, "m.onnx", vendor_options=vendor_option_settings(plan.vendors))
    assert "vendor_options" not in default and "vendor options" not in render(default, "text")
    chosen = vendor_option_settings(plan.vendors, {"rec": {"layout": "nhwc", "unroll": 2}})
    report = build_report(plan, "m.onnx", vendor_options=chosen)
    assert report["vendor_options"] == {"rec": {"layout": {"value": "nhwc", "default": "nchw", "source": "build"},
                                                "unroll": {"value": 2, "default": 4, "source": "build"}}}
    text = render(report, "text").splitlines()
    assert text[2] == "vendor options: rec.layout=nhwc, rec.unroll=2"  # by name, as a loaded artifact has them
    assert json.loads(render(report, "json"))["vendor_options"] == report["vendor_options"]


# -- dnnl ------------------------------------------------------------------------------------------
def _dnnl_partition():
    plan = byoc.partition(small_cnn(), ["dnnl"])
    (part,) = plan.partitions
    return partition_graph(plan.mod[part.global_var], part.name)


def test_dnnl_declares_winograd_contention_watch_and_shape_cache():
    options = {o.name: o for o in byoc.get_vendor("dnnl").declared_options}
    assert {n: (o.type, o.default, o.env) for n, o in options.items()} == {
        "winograd": (bool, True, "BYOC_DNNL_WINOGRAD"), "contention_watch": (bool, True, "BYOC_DNNL_CONTENTION"),
        "shape_cache": (int, 8, "")}
    assert all(o.doc for o in options.values())


def test_the_dnnl_graph_json_carries_the_options_and_json_runtime_graphs_stay_as_they_were():
    graph = _dnnl_partition()
    text = DnnlCodegen().serialize(graph).json
    assert GRAPH_OPTIONS in text and text.endswith(',"version":3}')  # the dnnl runtime's schema
    off = json.loads(DnnlCodegen().serialize(graph, {"winograd": False}).json)["options"]
    assert off == {"contention_watch": {"type": "bool", "value": True}, "shape_cache": {"type": "int", "value": 8},
                   "winograd": {"type": "bool", "value": False}}
    plain = JsonRuntimeCodegen().serialize(graph)
    assert plain.json == serialize(graph).json and '"options"' not in plain.json


def test_the_dnnl_codegen_writes_the_resolved_options_into_every_graph(monkeypatch):
    import byoc.codegens.dnnl as dnnl

    written = []

    def recording(graph, dtypes, options=None, version=None):
        written.append(options)
        return serialize(graph, dtypes, options, version)

    monkeypatch.setattr(dnnl, "serialize", recording)
    monkeypatch.setenv("BYOC_DNNL_CONTENTION", "off")
    artifact = byoc.compile(small_cnn(), ["dnnl"], vendor_options={"dnnl": {"winograd": False}})
    assert written == [{"winograd": False, "contention_watch": False, "shape_cache": 8}]
    assert artifact.vendor_option_settings["dnnl"] == {
        "winograd": OptionSetting(False, True, "build"),
        "contention_watch": OptionSetting(False, True, "environment", "BYOC_DNNL_CONTENTION=off from the environment"),
        "shape_cache": OptionSetting(8, 8, "default")}


def test_the_options_are_stored_in_the_exported_artifact_and_shown_after_load_in_a_fresh_process(tmp_path, monkeypatch):
    monkeypatch.setenv("BYOC_DNNL_CONTENTION", "off")
    artifact = byoc.compile(small_cnn(), ["dnnl"], vendor_options={"dnnl": {"winograd": False}})
    path = artifact.export(tmp_path / "m.so")
    monkeypatch.delenv("BYOC_DNNL_CONTENTION")
    script = textwrap.dedent(f"""
        import json, byoc
        loaded = byoc.load({str(path)!r})
        print(json.dumps(loaded.vendor_options, sort_keys=True))
        print(loaded.vendor_option_settings["dnnl"]["contention_watch"].note)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ['{"dnnl": {"contention_watch": false, "shape_cache": 8, "winograd": false}}',
                                "BYOC_DNNL_CONTENTION=off from the environment"]


def _big_3x3_conv():
    """A 3x3 stride-1 conv over 25 M multiply-adds: one the dnnl runtime runs as Winograd when allowed."""
    r = np.random.default_rng(8)
    w = (r.standard_normal((48, 48, 3, 3)) * 0.15).astype(np.float32)
    conv = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])
    return model([conv], [tensor("x", [1, 48, 38, 41])], [tensor("y", [1, 48, 38, 41])], [const("w", w)])


def test_winograd_off_in_the_options_changes_the_computed_numbers():
    m = _big_3x3_conv()
    x = np.random.default_rng(0).standard_normal((1, 48, 38, 41)).astype(np.float32)
    (on,) = byoc.compile(m, ["dnnl"]).run([x])
    (off,) = byoc.compile(m, ["dnnl"], vendor_options={"dnnl": {"winograd": False}}).run([x])
    (reference,) = onnxruntime_outputs(m, {"x": x})
    assert not np.array_equal(on, off)
    assert np.abs(off - reference).max() < np.abs(on - reference).max()


def test_a_loaded_artifact_computes_as_it_was_built_whatever_the_loading_environment(tmp_path):
    """The runtime reads winograd from the graph, not from the environment of the process that loads it: a .so
    built with Winograd off gives the same bytes when loaded where BYOC_DNNL_WINOGRAD=on, and one built with
    it on (the default) the same bytes where it is off."""
    m = _big_3x3_conv()
    x = np.random.default_rng(0).standard_normal((1, 48, 38, 41)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    for winograd, loading_env in ((False, "on"), (True, "off")):
        artifact = byoc.compile(m, ["dnnl"], vendor_options={"dnnl": {"winograd": winograd}})
        (built,) = artifact.run([x])
        artifact.export(tmp_path / "m.so", overwrite=True)
        script = (f"import numpy as np, byoc; np.save({str(tmp_path / 'y.npy')!r}, "
                  f"byoc.load({str(tmp_path / 'm.so')!r}).run([np.load({str(tmp_path / 'x.npy')!r})])[0])")
        env = {**os.environ, "BYOC_DNNL_WINOGRAD": loading_env}
        subprocess.run([sys.executable, "-c", script], check=True, env=env, capture_output=True)
        assert np.load(tmp_path / "y.npy").tobytes() == built.tobytes(), (winograd, loading_env)
