"""The vendor registry: vendors published as entry points, and vendors registered by a script.

Every vendor package, byoc's own included, publishes its :class:`Vendor` in
one way: an entry point of the group ``byoc.vendors`` that loads to a
:class:`Vendor` or to a zero-argument callable returning one
(``acme = "acme_byoc:VENDOR"``). byoc's own vendors are the entry points in
:data:`BUILTIN_ENTRY_POINTS`, read from here rather than from byoc's installed
metadata so that a source checkout has them too; the registry loads them and
those of installed packages the same way. A module that defines a vendor
does not register it itself.

Discovery happens lazily, the first time the registry is read, and is marked
done only once it has run through: an entry point that fails to load is
reported once (a ``RuntimeWarning`` naming it and its error), the other
vendors still work, and asking for the broken one by name repeats its
error. A script registers a vendor of its own with :func:`register_vendor`.

All state lives in one :class:`VendorRegistry` object, ``REGISTRY``; the
module functions are its methods. Reading the registry imports the vendors'
rule modules and nothing else: no runtime library is loaded and no file or
environment variable is touched.
"""

from __future__ import annotations

import threading
import warnings
from importlib import metadata
from typing import Callable, Iterable, Optional, Union

from byoc.errors import UnknownVendorError, VendorError
from byoc.vendor.rules import Vendor, as_codegen

ENTRY_POINT_GROUP = "byoc.vendors"
#: byoc's own vendors, as the entry points of group ``byoc.vendors`` that publish them.
BUILTIN_ENTRY_POINTS = tuple(
    metadata.EntryPoint(name, f"byoc.annotations.{name}:VENDOR", ENTRY_POINT_GROUP)
    for name in ("c_source", "json_runtime", "dnnl")
)

VendorSource = Union[Vendor, Callable[[], Vendor]]


def _as_vendor(source: VendorSource) -> Vendor:
    built = source() if callable(source) and not isinstance(source, Vendor) else source
    if not isinstance(built, Vendor):
        raise VendorError(f"register_vendor expects a Vendor, got {type(built).__name__}")
    return built


class VendorRegistry:
    """Registered vendors by name, plus the state of entry-point discovery."""

    def __init__(self, builtin: Iterable[metadata.EntryPoint] = BUILTIN_ENTRY_POINTS,
                 group: str = ENTRY_POINT_GROUP):
        self.builtin = tuple(builtin)
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

    def entry_points(self) -> list[metadata.EntryPoint]:
        """The entry points that publish vendors: byoc's own first, then those of installed packages (one of
        the same name as one before it is left out)."""
        seen: set[str] = set()
        found = []
        for entry in (*self.builtin, *metadata.entry_points(group=self.group)):
            if entry.name not in seen:
                seen.add(entry.name)
                found.append(entry)
        return found

    def _discover(self) -> None:
        with self._lock:
            if self._discovered:
                return
            for entry in self.entry_points():
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
