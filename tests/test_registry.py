"""Vendor registration: as a call, as a decorator, duplicates, lookups, entry points."""

from __future__ import annotations

import sys
import textwrap
import warnings

import pytest

import byoc
from byoc.vendor import registry
from byoc.codegens.c_source import CSourceCodegen
from byoc.errors import UnknownVendorError, VendorError
from byoc.vendor import OpRule, Vendor


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
