"""Vendor registration: as a call, as a decorator, duplicates, lookups, entry points."""

from __future__ import annotations

import sys
import textwrap

import pytest

import byoc
from byoc import registry
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


def test_entry_point_discovery(tmp_path, monkeypatch):
    (tmp_path / "plugin_vendor.py").write_text(textwrap.dedent("""
        from byoc.codegens.c_source import CSourceCodegen
        from byoc.vendor import OpRule, Vendor
        VENDOR = Vendor("plugin_v", (OpRule("plugin_v.relu", "relax.nn.relu"),), CSourceCodegen())
    """))
    dist = tmp_path / "plugin_vendor-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: plugin-vendor\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[byoc.vendors]\nplugin_v = plugin_vendor:VENDOR\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_discovered", False)
    try:
        assert "plugin_v" in byoc.list_vendors()
    finally:
        byoc.unregister_vendor("plugin_v")
        sys.modules.pop("plugin_vendor", None)
