"""Vendor options: the settings a vendor's codegen declares, and how one build resolves them.

A codegen declares its options as :class:`VendorOption` objects in
``Codegen.declared_options`` (name, type, default, one-line doc). A build
takes each option's value from, in rising order of precedence:

1. the declared default;
2. the :class:`~byoc.vendor.rules.Vendor`'s own ``options``;
3. what the user gave the build: ``byoc.compile(..., vendor_options={"dnnl":
   {"winograd": False}})``, ``byoc.build(plan, vendor_options=...)``, or the
   CLI's ``--vendor-option dnnl.winograd=off``;
4. the option's environment variable, when it declares one and it is set: a
   documented explicit override, read when the model is built, never when an
   artifact is loaded.

The resolved values reach the codegen's ``compile(partitions, options)``, and
each as an :class:`OptionSetting` (value, default, where it came from, a note
for the environment) is stored in the artifact, so a loaded artifact says how
it was built. An unknown name, a value of the wrong type or outside the
choices is a :class:`~byoc.errors.VendorOptionError` naming the vendor, the
option and what it takes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

from byoc.errors import VendorOptionError

#: The types an option may have.
OPTION_TYPES = (bool, int, float, str)
#: Where a resolved value came from, lowest precedence first.
SOURCES = ("default", "vendor", "build", "environment")
_TRUE, _FALSE = ("on", "true"), ("off", "false")


@dataclass(frozen=True)
class VendorOption:
    """One option a codegen takes: ``VendorOption("winograd", bool, True, "run 3x3 convs as Winograd")``.

    ``choices`` limits a value to those listed, ``minimum`` a number to at
    least that; ``env`` names an environment variable that, when set
    (non-empty) at build time, overrides the option (``on``/``off`` for a
    bool, else the value as text).
    """

    name: str
    type: type
    default: Any
    doc: str = ""
    choices: tuple = ()
    env: str = ""
    minimum: Optional[float] = None

    def __post_init__(self):
        if not self.name.isidentifier():
            raise VendorOptionError(f"option name {self.name!r} must be an identifier", option=self.name)
        if self.type not in OPTION_TYPES:
            raise VendorOptionError(f"option {self.name!r}: type {self.type!r} is not one of bool, int, float, str",
                                    option=self.name)
        object.__setattr__(self, "choices", tuple(self.choices))
        try:
            object.__setattr__(self, "default", self.check(self.default, ""))
        except VendorOptionError:
            raise VendorOptionError(f"option {self.name!r}: default {self.default!r} is not {self.takes()}",
                                    option=self.name) from None

    def takes(self) -> str:
        """What a value may be, for messages: ``on or off``, ``one of 'a', 'b'``, ``an int``."""
        if self.choices:
            return "one of " + ", ".join(format_value(c) for c in self.choices)
        if self.type is bool:
            return "on or off (True or False)"
        kind = {int: "an int", float: "a number", str: "a string"}[self.type]
        return kind if self.minimum is None else f"{kind} >= {format_value(self.minimum)}"

    def _bad(self, vendor: str, value: Any) -> VendorOptionError:
        return VendorOptionError(f"vendor {vendor!r} option {self.name!r} takes {self.takes()}, got {value!r}",
                                 vendor=vendor, option=self.name)

    def check(self, value: Any, vendor: str) -> Any:
        """``value`` as this option holds it (an int given for a float becomes a float), or a VendorOptionError."""
        if self.type is bool:
            ok = isinstance(value, bool)
        elif self.type is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif self.type is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            value = float(value) if ok else value
        else:
            ok = isinstance(value, str)
        if not ok or (self.choices and value not in self.choices) or (self.minimum is not None
                                                                       and value < self.minimum):
            raise self._bad(vendor, value)
        return value

    def parse(self, text: str, vendor: str) -> Any:
        """The value written as ``text`` (the CLI's ``--vendor-option``): ``on``/``off`` or ``true``/``false``
        for a bool, a number for an int or float."""
        if self.type is bool:
            lowered = text.strip().lower()
            if lowered not in _TRUE + _FALSE:
                raise self._bad(vendor, text)
            return self.check(lowered in _TRUE, vendor)
        try:
            value = self.type(text)
        except ValueError:
            raise self._bad(vendor, text) from None
        return self.check(value, vendor)

    def from_environment(self, vendor: str, environ: Mapping[str, str]) -> Optional["OptionSetting"]:
        """This option as its environment variable sets it, or None when there is none or it is unset."""
        text = environ.get(self.env, "") if self.env else ""
        if not text:
            return None
        if self.type is bool and text not in ("on", "off"):
            raise VendorOptionError(f"{self.env}={text} is neither on nor off; unset it or choose one "
                                    f"(it sets vendor {vendor!r} option {self.name!r})", vendor=vendor, option=self.name)
        value = text == "on" if self.type is bool else self.parse(text, vendor)
        return OptionSetting(value, self.default, "environment", f"{self.env}={text} from the environment")


@dataclass(frozen=True)
class OptionSetting:
    """One option as a build resolved it: its ``value``, its declared ``default``, the ``source`` of the value
    (one of :data:`SOURCES`) and, for the environment, a ``note`` saying which variable set it."""

    value: Any
    default: Any
    source: str = "default"
    note: str = ""

    @property
    def is_default(self) -> bool:
        """Whether the build used the default without anyone choosing otherwise (the report leaves these out)."""
        return self.value == self.default and self.source != "environment"

    def as_json(self) -> dict:
        """As the artifact's metadata stores it."""
        record = {"value": self.value, "default": self.default, "source": self.source}
        return {**record, "note": self.note} if self.note else record

    @classmethod
    def from_json(cls, record: Mapping) -> "OptionSetting":
        return cls(record["value"], record["default"], record.get("source", "default"), record.get("note", ""))


def format_value(value: Any) -> str:
    """An option value as the CLI writes it: ``on``/``off`` for bools."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def declared(codegen: Any) -> tuple:
    """The options ``codegen`` declares (``declared_options``; none for a codegen without them)."""
    return tuple(getattr(codegen, "declared_options", ()))


def check_declarations(options: Any, owner: str) -> None:
    """A VendorOptionError unless ``options`` is a tuple of :class:`VendorOption` with distinct names."""
    if isinstance(options, (str, VendorOption)) or not all(isinstance(o, VendorOption) for o in options):
        raise VendorOptionError(f"{owner}: declared_options must be a tuple of byoc.vendor.VendorOption, "
                                f"got {options!r}")
    names = [o.name for o in options]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise VendorOptionError(f"{owner}: option {twice[0]!r} is declared twice", option=twice[0])


def option(options: Iterable[VendorOption], name: str, vendor: str) -> VendorOption:
    """The option called ``name`` among ``options``, or a VendorOptionError naming the ones there are."""
    known = {o.name: o for o in options}
    if name not in known:
        choices = f"its options are {', '.join(sorted(known))}" if known else "it declares no options"
        raise VendorOptionError(f"vendor {vendor!r} has no option {name!r}; {choices}", vendor=vendor, option=name)
    return known[name]


def resolve(options: Iterable[VendorOption], vendor: str, own: Mapping[str, Any], given: Mapping[str, Any],
            environ: Optional[Mapping[str, str]] = None) -> dict[str, OptionSetting]:
    """Each declared option's setting: default < the vendor's ``own`` < ``given`` < the environment."""
    options = tuple(options)
    if not isinstance(given, Mapping):
        raise VendorOptionError(f"the options for vendor {vendor!r} must be a mapping of option name to value, "
                                f"got {type(given).__name__}", vendor=vendor)
    environ = os.environ if environ is None else environ
    settings = {}
    for name in list(own) + list(given):
        option(options, name, vendor)
    for declared_option in options:
        setting = OptionSetting(declared_option.default, declared_option.default)
        for source, values in (("vendor", own), ("build", given)):
            if declared_option.name in values:
                setting = OptionSetting(declared_option.check(values[declared_option.name], vendor),
                                        declared_option.default, source)
        settings[declared_option.name] = declared_option.from_environment(vendor, environ) or setting
    return settings


def vendor_option_settings(vendors: Iterable[Any], vendor_options: Optional[Mapping] = None,
                           environ: Optional[Mapping[str, str]] = None) -> dict[str, dict[str, OptionSetting]]:
    """Vendor name -> option name -> :class:`~byoc.vendor.OptionSetting`, for each of ``vendors`` whose codegen
    declares options, as a build given ``vendor_options`` (vendor name -> option name -> value) resolves them:
    default < the Vendor's ``options`` < ``vendor_options`` < the option's environment variable.

    A vendor that is not among ``vendors``, an unknown option or a bad value
    is a :class:`~byoc.errors.VendorOptionError` naming it and the choices.
    """
    vendors = list(vendors)
    vendor_options = {} if vendor_options is None else vendor_options
    if not isinstance(vendor_options, Mapping):
        raise VendorOptionError(f"vendor_options must map vendor names to their options, got "
                                f"{type(vendor_options).__name__}")
    names = [v.name for v in vendors]
    for name in vendor_options:
        if name not in names:
            raise VendorOptionError(f"vendor_options names vendor {name!r}, which is not among this build's vendors "
                                    f"({', '.join(names) or 'none'})", vendor=str(name))
    settings = {v.name: v.resolve_options(vendor_options.get(v.name), environ) for v in vendors}
    return {name: options for name, options in settings.items() if options}
