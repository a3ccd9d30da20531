"""The vendor registry: built-in vendors, registered ones, and entry points.

Outside packages publish vendors through the entry-point group
``byoc.vendors``; each entry point loads to a :class:`Vendor` or to a
zero-argument callable returning one. Discovery happens lazily, the first
time the registry is read, and is marked done only once it has run through:
a plug-in that fails to load is reported once (a ``RuntimeWarning`` naming it
and its error), the other vendors still work, and asking for the broken one
by name repeats its error.

All state lives in one :class:`VendorRegistry` object, ``REGISTRY``; the
module functions are its methods. Reading the registry imports the vendors'
rule modules and nothing else: no runtime library is loaded and no file or
environment variable is touched.
"""

from __future__ import annotations

import importlib
import threading
import warnings
from importlib import metadata
from typing import Callable, Iterable, Optional, Union

from byoc.errors import UnknownVendorError, VendorError
from byoc.vendor.rules import Vendor, as_codegen

ENTRY_POINT_GROUP = "byoc.vendors"
BUILTIN_MODULES = ("byoc.annotations.c_source", "byoc.annotations.json_runtime", "byoc.annotations.dnnl")

VendorSource = Union[Vendor, Callable[[], Vendor]]


def _as_vendor(source: VendorSource) -> Vendor:
    built = source() if callable(source) and not isinstance(source, Vendor) else source
    if not isinstance(built, Vendor):
        raise VendorError(f"register_vendor expects a Vendor, got {type(built).__name__}")
    return built


class VendorRegistry:
    """Registered vendors by name, plus the state of entry-point discovery."""

    def __init__(self, builtin_modules: Iterable[str] = BUILTIN_MODULES, group: str = ENTRY_POINT_GROUP):
        self.builtin_modules = tuple(builtin_modules)
        self.group = group
        self._vendors: dict[str, Vendor] = {}
        self._failed: dict[str, str] = {}  # entry-point name -> why it did not load
        self._discovered = False
        self._lock = threading.RLock()

    def register(self, vendor: VendorSource, *, replace: bool = False) -> Vendor:
        """Register ``vendor`` (or the Vendor a zero-argument callable returns); returns the Vendor."""
        built = _as_vendor(vendor)
        with self._lock:
            known = self._vendors.get(built.name)
            if known is not None and known is not built and not replace:
                raise VendorError(
                    f"a vendor named {built.name!r} is already registered; pick another name "
                    "or pass replace=True"
                )
            self._vendors[built.name] = built
        return built

    def unregister(self, name: str) -> None:
        """Remove a vendor (mostly for tests)."""
        with self._lock:
            self._vendors.pop(name, None)

    def reset(self) -> None:
        """Forget every vendor and every discovery result; the next read discovers again (tests)."""
        with self._lock:
            self._vendors.clear()
            self._failed.clear()
            self._discovered = False

    def names(self) -> list[str]:
        """Names of every registered vendor, sorted."""
        self._discover()
        return sorted(self._vendors)

    def get(self, name: str) -> Vendor:
        """The vendor registered as ``name``."""
        self._discover()
        try:
            return self._vendors[name]
        except KeyError:
            pass
        if name in self._failed:
            raise UnknownVendorError(f"vendor {name!r} could not be loaded: {self._failed[name]}")
        raise UnknownVendorError(
            f"unknown vendor {name!r}; registered vendors: {', '.join(sorted(self._vendors)) or 'none'}"
        )

    def _discover(self) -> None:
        with self._lock:
            if self._discovered:
                return
            for module in self.builtin_modules:
                # Registering the module's VENDOR again is a no-op, and re-registers it after reset().
                self.register(importlib.import_module(module).VENDOR)
            for entry in metadata.entry_points(group=self.group):
                if entry.name in self._vendors:
                    continue
                try:
                    vendor = _as_vendor(entry.load())
                except Exception as err:  # noqa: BLE001 - a broken plug-in must not break byoc
                    why = (f"entry point {entry.name!r} ({entry.value}) in group {self.group!r} failed to load: "
                           f"{type(err).__name__}: {err}")
                    self._failed[entry.name] = why
                    warnings.warn(f"byoc: {why}; the other vendors are available", RuntimeWarning, stacklevel=4)
                    continue
                if vendor.name not in self._vendors:
                    self.register(vendor)
            self._discovered = True


REGISTRY = VendorRegistry()


def register_vendor(vendor: Union[VendorSource, None] = None, *, replace: bool = False):
    """Register a vendor; usable as a call or as a decorator.

    ``register_vendor(v)`` registers the Vendor ``v`` and returns it. As a
    decorator on a zero-argument function returning a Vendor, it registers
    the result and returns the function unchanged. A second vendor with the
    same name is refused unless ``replace=True``.
    """
    if vendor is None:
        return lambda target: register_vendor(target, replace=replace)
    REGISTRY.register(vendor, replace=replace)
    return vendor


def unregister_vendor(name: str) -> None:
    """Remove a vendor (mostly for tests)."""
    REGISTRY.unregister(name)


def list_vendors() -> list[str]:
    """Names of every registered vendor, sorted."""
    return REGISTRY.names()


def get_vendor(name: str) -> Vendor:
    """The vendor registered as ``name``."""
    return REGISTRY.get(name)


def vendor_availability(vendor: Union[str, Vendor]) -> Optional[str]:
    """None when ``vendor`` (a name or a Vendor) can build here, else why not and what to install, as its codegen
    says (:meth:`Codegen.availability <byoc.vendor.Codegen.availability>`; nothing is loaded). A check that
    raises is taken as the reason."""
    codegen = as_codegen((vendor if isinstance(vendor, Vendor) else get_vendor(vendor)).codegen)
    try:
        reason = codegen.availability()
    except Exception as err:  # noqa: BLE001 - a broken check must not break listing the vendors
        return f"its availability check raised {type(err).__name__}: {err}"
    if reason is None:
        return None
    return " ".join(str(reason).split()) or "its codegen gave no reason"


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
