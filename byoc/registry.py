"""The vendor registry: built-in vendors, registered ones, and entry points.

Outside packages publish vendors through the entry-point group
``byoc.vendors``; each entry point loads to a :class:`Vendor` or to a
zero-argument callable returning one. Discovery happens once, lazily, the
first time the registry is read.
"""

from __future__ import annotations

import threading
from importlib import metadata
from typing import Callable, Iterable, Union

from .errors import UnknownVendorError, VendorError
from .vendor import Vendor

ENTRY_POINT_GROUP = "byoc.vendors"
_BUILTIN_MODULES = ("byoc.annotations.c_source", "byoc.annotations.json_runtime", "byoc.annotations.dnnl")

_vendors: dict[str, Vendor] = {}
_discovered = False
_lock = threading.RLock()


def register_vendor(vendor: Union[Vendor, Callable[[], Vendor], None] = None, *, replace: bool = False):
    """Register a vendor; usable as a call or as a decorator.

    ``register_vendor(v)`` registers the Vendor ``v`` and returns it. As a
    decorator on a zero-argument function returning a Vendor, it registers
    the result and returns the function unchanged. A second vendor with the
    same name is refused unless ``replace=True``.
    """
    if vendor is None:
        return lambda target: register_vendor(target, replace=replace)
    built = vendor() if callable(vendor) and not isinstance(vendor, Vendor) else vendor
    if not isinstance(built, Vendor):
        raise VendorError(f"register_vendor expects a Vendor, got {type(built).__name__}")
    with _lock:
        if built.name in _vendors and not replace and _vendors[built.name] is not built:
            raise VendorError(
                f"a vendor named {built.name!r} is already registered; pick another name "
                "or pass replace=True"
            )
        _vendors[built.name] = built
    return vendor


def unregister_vendor(name: str) -> None:
    """Remove a vendor (mostly for tests)."""
    with _lock:
        _vendors.pop(name, None)


def _discover() -> None:
    global _discovered
    with _lock:
        if _discovered:
            return
        _discovered = True
        import importlib

        for module in _BUILTIN_MODULES:
            importlib.import_module(module)
        for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
            try:
                loaded = entry.load()
            except Exception as err:  # a broken plug-in must not break byoc
                raise VendorError(
                    f"entry point {entry.name!r} ({entry.value}) in group {ENTRY_POINT_GROUP!r} "
                    f"failed to load: {type(err).__name__}: {err}"
                ) from err
            vendor = loaded() if callable(loaded) and not isinstance(loaded, Vendor) else loaded
            if vendor.name not in _vendors:
                register_vendor(vendor)


def list_vendors() -> list[str]:
    """Names of every registered vendor, sorted."""
    _discover()
    return sorted(_vendors)


def get_vendor(name: str) -> Vendor:
    """The vendor registered as ``name``."""
    _discover()
    try:
        return _vendors[name]
    except KeyError:
        raise UnknownVendorError(
            f"unknown vendor {name!r}; registered vendors: {', '.join(sorted(_vendors)) or 'none'}"
        ) from None


def resolve_vendors(vendors: Iterable[Union[str, Vendor]]) -> list[Vendor]:
    """Turn names or Vendor objects into Vendors, in the given (priority) order."""
    if isinstance(vendors, (str, Vendor)):
        vendors = [vendors]
    resolved: list[Vendor] = []
    for item in vendors:
        vendor = item if isinstance(item, Vendor) else get_vendor(item)
        if any(v.name == vendor.name for v in resolved):
            raise VendorError(f"vendor {vendor.name!r} is listed twice")
        resolved.append(vendor)
    return resolved
