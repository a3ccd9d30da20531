"""The sizes a build specializes a static-shape vendor's partitions for.

A vendor whose hardware runs static shapes only says so (``Vendor(static_shapes=True)``). A model with symbolic
dims still reaches it: the build names the sizes the deployment runs (``specialize=``, the CLI's
``--specialize``), and each of the vendor's partitions is compiled once per size of the dims it has
(:class:`Specialization`). At run time a dispatcher picks the specialization of the call's sizes, and runs the
partition on the host at any other size, or the artifact refuses such a call, as the vendor declared
(``Vendor(other_sizes=...)``; :mod:`byoc.pipeline.build.specialized`).

``specialize=`` takes, per symbolic dim, a size, a list of sizes or a range (every size in it)::

    specialize={"batch": [1, 2, 4]}                      # three specializations
    specialize={"batch": (1, 4), "seq": 128}             # batch 1, 2, 3 and 4, each at seq 128
    specialize=[{"batch": 1, "seq": 128}, {"batch": 8, "seq": 64}]   # profiles: each mapping as above

A mapping is every combination of its dims' sizes; a list of mappings is their union. Each partition gets the
distinct sizes of the dims it has, so a partition with no ``seq`` is compiled once per batch size.

The vendor's partition check judges each specialization on its own graph. While it accepts the partition whole
at some size, any other verdict at a size (a reason, a LeaveOut, a Split) refuses that size alone: it runs on the
host, and the report says why. When it accepts no size whole, the first size's LeaveOut or Split changes the
partition for every size (:func:`byoc.pipeline.partitioning.partition_checks.partition_check_verdicts`).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from byoc.errors import DynamicShapeError

#: The most specializations one build may name: each is a compile of every static-shape partition.
MAX_SPECIALIZATIONS = 64


@dataclass(frozen=True)
class Specialization:
    """One size of a partition's symbolic dims, compiled as a partition of its own, exported as ``symbol``.

    ``refused`` is why its vendor's partition check refused this size ("" when it compiles): at these sizes the
    partition runs on the host."""

    sizes: Mapping[str, int]
    symbol: str
    refused: str = ""

    def describe(self) -> str:
        return ", ".join(f"{name}={size}" for name, size in self.sizes.items())


def parse_specialize(setting, dims: Mapping) -> tuple[dict[str, int], ...]:
    """``specialize=`` as profiles (dim name -> size), checked against the model's symbolic ``dims`` (name ->
    :class:`~byoc.pipeline.frontend.onnx_model.DimRange`). Raises :class:`DynamicShapeError` naming what is
    wrong."""
    if not setting:
        return ()
    mappings = [setting] if isinstance(setting, Mapping) else list(setting)
    profiles: dict[tuple, dict[str, int]] = {}
    for mapping in mappings:
        if not isinstance(mapping, Mapping) or not mapping:
            raise DynamicShapeError(f"specialize={setting!r}: give a mapping of dim names to sizes, or a list of "
                                    "them ({'batch': [1, 2, 4]})")
        names = [str(name) for name in mapping]
        sizes = [_sizes(name, value, dims) for name, value in mapping.items()]
        for combination in itertools.product(*sizes):
            profile = dict(zip(names, combination))
            profiles.setdefault(tuple(sorted(profile.items())), profile)
            if len(profiles) > MAX_SPECIALIZATIONS:
                raise DynamicShapeError(f"specialize={setting!r} names more than {MAX_SPECIALIZATIONS} sizes: each "
                                        "is a compile of every partition; name the sizes the deployment runs")
    return tuple(profiles.values())


def _sizes(name: str, value, dims: Mapping) -> list[int]:
    if name not in dims:
        raise DynamicShapeError(f"specialize names dim {name!r}, which is no symbolic dim of the model "
                                f"(its symbolic dims: {', '.join(sorted(dims)) or 'none'})")
    bad = DynamicShapeError(f"specialize[{name!r}] = {value!r}: give a size (4), a list of sizes ([1, 2, 4]) or a "
                            "range ((1, 4) or \"1..4\": every size in it)")
    if isinstance(value, bool):
        raise bad
    if isinstance(value, int):
        sizes = [value]
    elif isinstance(value, str) and value.strip().isdigit():
        sizes = [int(value)]
    elif isinstance(value, str) and ".." in value:
        low, _, high = value.partition("..")
        if not (low.strip().isdigit() and high.strip().isdigit()):
            raise bad
        sizes = list(range(int(low), int(high) + 1))
    elif isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) for v in value):
        sizes = list(range(value[0], value[1] + 1))
    elif isinstance(value, (list, tuple)) and value and all(isinstance(v, int) and not isinstance(v, bool)
                                                            for v in value):
        sizes = list(value)
    else:
        raise bad
    bounds = dims[name]
    outside = [s for s in sizes if not bounds.holds(s)]
    if not sizes or outside:
        raise DynamicShapeError(f"specialize[{name!r}] = {value!r}: {outside[0] if outside else 'no size'} is "
                                f"outside the dim's range {bounds.describe()}")
    return list(dict.fromkeys(sizes))


def specialized_symbol(partition: str, sizes: Mapping[str, int]) -> str:
    """The symbol a partition's specialization is exported as: ``npu_0__batch_4``."""
    return "__".join([partition, *(re.sub(r"\W", "_", f"{name}_{size}") for name, size in sizes.items())])


def matches(built: Mapping[str, int], sizes: Mapping[str, int]) -> bool:
    """Whether a call of ``sizes`` (dim name -> size) is at the sizes ``built`` (a specialization's) names."""
    return all(sizes.get(name) == size for name, size in built.items())


def partition_sizes(profiles: Sequence[Mapping[str, int]], names: Sequence[str]) -> list[dict[str, int]]:
    """The distinct sizes of the dims ``names`` (a partition's) among ``profiles``, in their order; empty when a
    dim of ``names`` is named by no profile."""
    sizes: dict[tuple, dict[str, int]] = {}
    for profile in profiles:
        if not all(name in profile for name in names):
            return []
        sized = {name: profile[name] for name in names}
        sizes.setdefault(tuple(sized.items()), sized)
    return list(sizes.values())


def specialized_dims(profiles: Sequence[Mapping[str, int]]) -> dict[str, tuple[int, ...]]:
    """Each dim ``profiles`` name -> its sizes: what a static-shape vendor's rule checks read as
    ``Match.specialized``."""
    found: dict[str, dict[int, None]] = {}
    for profile in profiles:
        for name, size in profile.items():
            found.setdefault(name, {})[size] = None
    return {name: tuple(sorted(sizes)) for name, sizes in found.items()}


def symbolic_dims(func) -> list[str]:
    """The names of the symbolic dims a partition function's parameters define, in their order."""
    from tvm import relax

    return list(dict.fromkeys(var.name for var in relax.analysis.defined_symbolic_vars(func)))


def host_function(func, symbol: str):
    """``func`` (a partition function) as plain Relax ops, exported as ``symbol``: its composites inlined, so the
    host builds it as any of its own functions."""
    import tvm
    from tvm import relax

    mod = tvm.IRModule({"main": func.without_attr("Codegen").with_attr("global_symbol", symbol)})
    return relax.transform.InlinePrivateFunctions()(relax.transform.LambdaLift()(mod))["main"]


def specialized_function(func, sizes: Mapping[str, int], symbol: str):
    """``func`` (a partition function) with each symbolic dim named in ``sizes`` bound to its size, exported as
    ``symbol``.

    The composites inside a partition define their own symbolic variables of the same names, so the variables
    are bound by object, every one of a name alike.
    """
    from tvm import relax, tirx

    found = list(relax.analysis.defined_symbolic_vars(func))
    for block in func.body.blocks:
        for binding in block.bindings:
            if isinstance(binding.value, relax.Function):
                found += relax.analysis.defined_symbolic_vars(binding.value)
    bound = {var: tirx.IntImm(str(var.ty), sizes[var.name]) for var in found if var.name in sizes}
    return func.bind_symbolic_vars(bound).with_attr("global_symbol", symbol)
