"""Codegen faults: a vendor whose codegen raises or emits C that does not compile.

By default its partitions go back to the host (re-partitioned without it, so
another vendor may take them) with a RuntimeWarning that names the vendor and
the error; with ``strict=True`` the build raises a CodegenError. Either way
the model's answer is onnxruntime's.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest

import byoc
from byoc.annotations.c_source import RULES as C_RULES
from byoc.codegens.c_source import CSourceCodegen
from byoc.errors import CodegenError

from models import onnxruntime_outputs, random_inputs, small_cnn, small_mlp


class RaisingCodegen:
    def compile(self, partitions, options):
        raise RuntimeError("simulated vendor crash")


class BrokenCCodegen(CSourceCodegen):
    """Emits C with a syntax error at the end."""

    def source(self, partitions):
        return super().source(partitions) + "\nthis is not C;\n"


def _vendor(name, codegen):
    rules = tuple(replace(r, name=f"{name}.{r.name.split('.', 1)[1]}") for r in C_RULES)
    return byoc.Vendor(name, rules, codegen)


RAISING = _vendor("fault_raises", RaisingCodegen())
BROKEN_C = _vendor("fault_bad_c", BrokenCCodegen())
FAULTS = {"raises": (RAISING, "simulated vendor crash"), "bad_c": (BROKEN_C, "does not compile")}


def _check_numbers(artifact, m):
    feeds = random_inputs(m, seed=3)
    for actual, expected in zip(artifact.run(feeds), onnxruntime_outputs(m, feeds)):
        np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_failing_vendor_goes_back_to_the_host_with_a_warning(fault):
    vendor, text = FAULTS[fault]
    m = small_cnn()
    with pytest.warns(RuntimeWarning) as record:
        artifact = byoc.compile(m, vendors=[vendor])
    messages = [str(w.message) for w in record]
    assert any(vendor.name in msg and text in msg for msg in messages), messages
    assert artifact.plan.partitions == []
    assert all(d.on_host for d in artifact.plan.decisions.values())
    _check_numbers(artifact, m)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_the_next_vendor_takes_over(fault):
    vendor, _ = FAULTS[fault]
    m = small_mlp()
    with pytest.warns(RuntimeWarning, match=vendor.name):
        artifact = byoc.build(m, vendors=[vendor, "json_runtime"])
    assert artifact.plan.partitions and {p.vendor for p in artifact.plan.partitions} == {"json_runtime"}
    _check_numbers(artifact, m)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_strict_raises_a_clean_codegen_error(fault):
    vendor, text = FAULTS[fault]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # strict mode warns about nothing
        with pytest.raises(CodegenError, match=text) as info:
            byoc.compile(small_cnn(), vendors=[vendor], strict=True)
    assert vendor.name in str(info.value)


def test_strict_on_a_plan():
    plan = byoc.partition(small_cnn(), [BROKEN_C])
    with pytest.raises(CodegenError, match="fault_bad_c"):
        byoc.build(plan, strict=True)


def test_healthy_vendors_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        artifact = byoc.compile(small_cnn(), vendors=["c_source", "json_runtime"], strict=False)
    assert artifact.plan.partitions
