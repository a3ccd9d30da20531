"""Vendor registration: as a call, as a decorator, duplicates, lookups, entry points; the codegen interface."""

from __future__ import annotations

import sys
import textwrap
import warnings

import pytest

import byoc
from byoc.vendor import registry
from byoc.codegens.c_source import CSourceCodegen
from byoc.errors import UnknownVendorError, VendorError
from byoc.vendor import (Codegen, OpRule, RuntimeMemory, Vendor, as_codegen, runtime_memory, runtime_module_kinds,
                         standalone_source)


def _vendor(name):
    return Vendor(name, (OpRule(f"{name}.relu", "relax.nn.relu"),), CSourceCodegen())


def test_builtin_vendor_is_listed():
    assert "c_source" in byoc.list_vendors()
    assert byoc.get_vendor("c_source").name == "c_source"


def test_register_as_call_and_refuse_duplicates():
    vendor = _vendor("reg_call")
    try:
        assert byoc.register_vendor(vendor) is vendor
        with pytest.raises(VendorError, match="already registered"):
            byoc.register_vendor(_vendor("reg_call"))
        assert byoc.get_vendor("reg_call") is vendor
    finally:
        byoc.unregister_vendor("reg_call")


def test_register_as_decorator_returns_the_function():
    try:
        @byoc.register_vendor
        def make():
            return _vendor("reg_deco")

        assert callable(make) and make().name == "reg_deco"
        assert "reg_deco" in byoc.list_vendors()
    finally:
        byoc.unregister_vendor("reg_deco")


def test_unknown_vendor_names_the_known_ones():
    with pytest.raises(UnknownVendorError, match="c_source"):
        byoc.get_vendor("nope")


@pytest.mark.parametrize("bad", [
    lambda: Vendor("bad.name", (), CSourceCodegen()),
    lambda: Vendor("v", (OpRule("other.relu", "relax.nn.relu"),), CSourceCodegen()),
    lambda: Vendor("v", (OpRule("v.relu", "relax.nn.relu"), OpRule("v.relu", "relax.nn.relu")), CSourceCodegen()),
    lambda: Vendor("v", (), object()),
    lambda: Vendor("v", (OpRule("v.relu", "relax.nn.relu"),), CSourceCodegen(), joining_rules=("where",)),
])
def test_invalid_vendors_are_refused(bad):
    with pytest.raises(VendorError):
        bad()


def test_op_rule_with_unknown_op_is_refused():
    vendor = Vendor("v_bad_op", (OpRule("v_bad_op.x", "relax.no_such_op"),), CSourceCodegen())
    from models import single_op

    with pytest.raises(VendorError, match="not a Relax op"):
        byoc.partition(single_op("Relu", {"x": [2]}, [2]), [vendor])


def _plugin(tmp_path, monkeypatch, entry_points: str, modules: dict[str, str]):
    """A fake installed distribution publishing ``entry_points`` in the byoc.vendors group."""
    for name, text in modules.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
    dist = tmp_path / "plugin_vendor-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: plugin-vendor\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[byoc.vendors]\n" + entry_points)
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.REGISTRY.reset()


@pytest.fixture
def fresh_registry():
    yield registry.REGISTRY
    registry.REGISTRY.reset()
    for name in ("plugin_vendor", "broken_vendor"):
        sys.modules.pop(name, None)


def test_entry_point_discovery(tmp_path, monkeypatch, fresh_registry):
    _plugin(tmp_path, monkeypatch, "plugin_v = plugin_vendor:VENDOR\n", {"plugin_vendor": """
        from byoc.codegens.c_source import CSourceCodegen
        from byoc.vendor import OpRule, Vendor
        VENDOR = Vendor("plugin_v", (OpRule("plugin_v.relu", "relax.nn.relu"),), CSourceCodegen())
    """})
    assert {"plugin_v", "c_source", "dnnl", "json_runtime"} <= set(byoc.list_vendors())


def test_a_broken_plugin_is_reported_once_by_name_and_the_others_still_work(tmp_path, monkeypatch, fresh_registry):
    _plugin(tmp_path, monkeypatch, "broken_v = broken_vendor:VENDOR\nplugin_v = plugin_vendor:VENDOR\n", {
        "broken_vendor": "raise ImportError('libnpu.so: cannot open shared object file')\n",
        "plugin_vendor": """
            from byoc.codegens.c_source import CSourceCodegen
            from byoc.vendor import OpRule, Vendor
            VENDOR = Vendor("plugin_v", (OpRule("plugin_v.relu", "relax.nn.relu"),), CSourceCodegen())
        """,
    })
    with pytest.warns(RuntimeWarning, match=r"entry point 'broken_v' \(broken_vendor:VENDOR\).*ImportError: "
                                            r"libnpu.so: cannot open shared object file"):
        names = byoc.list_vendors()
    assert "plugin_v" in names and "c_source" in names and "broken_v" not in names
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reported once: discovery is done
        assert byoc.list_vendors() == names
    with pytest.raises(UnknownVendorError, match=r"vendor 'broken_v' could not be loaded: .*libnpu.so"):
        byoc.get_vendor("broken_v")


def test_reset_forgets_registered_vendors_and_rediscovers_the_builtin_ones(fresh_registry):
    byoc.register_vendor(Vendor("reg_reset", (), CSourceCodegen()))
    assert "reg_reset" in byoc.list_vendors()
    fresh_registry.reset()
    assert "reg_reset" not in byoc.list_vendors()
    assert {"c_source", "dnnl", "json_runtime"} <= set(byoc.list_vendors())


# -- the codegen interface (byoc.vendor.Codegen) ---------------------------------------------


def _relu_vendor(name, codegen):
    return Vendor(name, (OpRule(f"{name}.relu", "relax.nn.relu"),), codegen)


@pytest.mark.parametrize("attribute, capability", [
    ("standalone_sources", "standalone_source"),
    ("module_kind", "module_kinds"),
    ("runtime_mem", "runtime_memory"),
    ("load_runtimes", "load_runtime"),
    ("availabilty", "availability"),
])
@pytest.mark.parametrize("base", [CSourceCodegen, object], ids=["subclass", "duck-typed"])
def test_a_misspelt_capability_is_an_error_at_registration_naming_it(attribute, capability, base):
    def misspelt(self, *args):
        return "int x;"

    methods = {"compile": lambda self, partitions, options: [], attribute: misspelt}
    codegen = type("Typo", (base,), methods)()
    with pytest.raises(VendorError, match=rf"vendor 'typo': codegen Typo has '{attribute}', which is not part of the "
                                          rf"codegen interface but looks like the capability '{capability}'"):
        _relu_vendor("typo", codegen)


def test_a_codegen_must_implement_compile():
    class NoCompile(Codegen):
        def standalone_source(self, partitions):
            return ""

    with pytest.raises(VendorError, match="codegen NoCompile must have a compile"):
        _relu_vendor("nocompile", NoCompile())
    with pytest.raises(VendorError, match="codegen object must have a compile"):
        _relu_vendor("nocompile", object())


@pytest.mark.parametrize("attributes, message", [
    ({"standalone_source": "int x;"}, "standalone_source must be a method, not str"),
    ({"module_kinds": "byoc_npu"}, "module_kinds must be a tuple of TVM module type keys"),
    ({"availability": None}, "availability must be a method, not NoneType"),
], ids=["not-callable", "kinds-not-a-tuple", "availability-not-callable"])
def test_capabilities_must_be_methods_and_module_kinds_strings(attributes, message):
    codegen = type("Odd", (Codegen,), {"compile": lambda self, partitions, options: [], **attributes})()
    with pytest.raises(VendorError, match=message):
        _relu_vendor("odd", codegen)


def test_helpers_with_a_leading_underscore_or_far_from_a_capability_are_the_codegens_own():
    class Helpers(CSourceCodegen):
        library = "libnpu.so"

        def _standalone_sources(self):
            return []

        def compiler(self):  # near compile, which is required and present: not a misspelling
            return "gcc"

    _relu_vendor("helpers", Helpers())


def test_defaults_apply_to_a_codegen_that_overrides_only_compile():
    class OnlyCompile(Codegen):
        def compile(self, partitions, options):
            return CSourceCodegen().compile(partitions, options)

    codegen = OnlyCompile()
    _relu_vendor("only_compile", codegen)
    assert codegen.module_kinds == () and codegen.load_runtime() is None
    assert codegen.standalone_source([]) is None and codegen.runtime_memory([], []) == {}
    assert codegen.availability() is None
    assert runtime_module_kinds(codegen) == () and standalone_source(codegen) is None
    assert runtime_memory(codegen, [], []) == {}
    from models import single_op

    artifact = byoc.compile(single_op("Relu", {"x": [2, 3]}, [2, 3]), [_relu_vendor("only_compile", codegen)])
    assert [p.vendor for p in artifact.plan.partitions] == ["only_compile"] and artifact.runtime_memory == {}


def test_a_duck_typed_codegen_still_works_and_is_seen_through_the_interface():
    import numpy as np

    from models import single_op

    class Duck:  # no base class, as out-of-tree vendors wrote before the interface
        def __init__(self):
            self.inner, self.calls = CSourceCodegen(), []

        def compile(self, partitions, options):
            self.calls.append([p.symbol for p in partitions])
            return self.inner.compile(partitions, options)

        def runtime_memory(self, partitions, modules):
            return {p.symbol: RuntimeMemory(1, 2) for p in partitions}

    duck = Duck()
    vendor = _relu_vendor("duck", duck)
    assert vendor.codegen is duck and isinstance(as_codegen(duck), Codegen)
    assert as_codegen(duck).module_kinds == () and as_codegen(duck).standalone_source([]) is None
    assert as_codegen(duck).availability() is None
    assert standalone_source(duck) is None
    x = np.array([[-1.0, 2.0, -3.0]], np.float32)
    artifact = byoc.compile(single_op("Relu", {"x": [1, 3]}, [1, 3]), [vendor])
    assert duck.calls == [["duck_0"]]
    assert artifact.runtime_memory == {"duck_0": RuntimeMemory(1, 2)}
    np.testing.assert_array_equal(artifact.run([x])[0], np.maximum(x, 0))


def test_the_in_tree_codegens_subclass_the_interface():
    for name in ("c_source", "json_runtime", "dnnl"):
        assert isinstance(byoc.get_vendor(name).codegen, Codegen), name
    assert standalone_source(byoc.get_vendor("c_source").codegen) is not None
    assert standalone_source(byoc.get_vendor("json_runtime").codegen) is None
    assert runtime_module_kinds(byoc.get_vendor("json_runtime").codegen) == ("byoc_json_runtime",)


# -- availability: whether a vendor can build here, without loading anything -------------------
def _without_wheel(monkeypatch, dist):
    """importlib.metadata as if the distribution ``dist`` were not installed."""
    from importlib import metadata

    real = metadata.distribution

    def distribution(name):
        if name == dist:
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "distribution", distribution)


def test_dnnl_says_it_is_unavailable_without_the_onednn_wheel_and_what_to_install(monkeypatch):
    from byoc.vendor.registry import vendor_availability

    _without_wheel(monkeypatch, "onednn-cpu-gomp")
    reason = vendor_availability("dnnl")
    assert reason is not None and "onednn-cpu-gomp is not installed" in reason
    assert 'pip install "byoc-tvm[dnnl]"' in reason
    assert byoc.get_vendor("dnnl").codegen.availability() == reason
    assert vendor_availability("c_source") is None and vendor_availability("json_runtime") is None



def test_dnnl_says_it_is_unavailable_without_its_runtime_library(monkeypatch):
    from byoc.codegens.dnnl import DNNL_RUNTIME
    from byoc.vendor.registry import vendor_availability

    monkeypatch.setattr(DNNL_RUNTIME, "package", "byoc.vendor")  # a package without libbyoc_dnnl.so
    assert "the dnnl runtime library (libbyoc_dnnl.so) is not installed" in vendor_availability("dnnl")


def test_availability_is_read_without_loading_the_runtime(monkeypatch):
    from byoc.codegens.dnnl import DNNL_RUNTIME
    from byoc.vendor.registry import vendor_availability

    def refuse(*_):
        raise AssertionError("availability loaded the runtime library")

    monkeypatch.setattr(type(DNNL_RUNTIME), "load", refuse, raising=False)
    monkeypatch.setattr(byoc.get_vendor("dnnl").codegen, "load_runtime", refuse)
    vendor_availability("dnnl")  # installed or not: it only reads package metadata


def test_a_codegens_own_availability_and_a_check_that_raises():
    class Missing(CSourceCodegen):
        def availability(self):
            return "the acme SDK is not installed;\n  pip install acme-sdk"

    class Broken(CSourceCodegen):
        def availability(self):
            raise OSError("no /dev/acme")

    from byoc.vendor.registry import vendor_availability

    assert vendor_availability(_relu_vendor("missing", Missing())) == "the acme SDK is not installed; pip install acme-sdk"
    assert vendor_availability(_relu_vendor("broken", Broken())) == "its availability check raised OSError: no /dev/acme"
