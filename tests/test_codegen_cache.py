"""The codegen cache: a second build of the same model with a cached vendor runs the vendor compiler 0 times.

A vendor whose codegen declares ``cache_version`` has its modules kept by the content of the partitions, the
options and that version; what comes back must compute what onnxruntime does. Changing any input compiles
again; a damaged entry is compiled again, never a failed build; a codegen without a version is never cached.
"""

from __future__ import annotations

import numpy as np
import pytest

import byoc
from byoc.codegens.c_source import CSourceCodegen
from byoc.codegens.dnnl import DnnlCodegen
from byoc.pipeline.build.codegen_cache import CACHE_ENV
from byoc.vendor import OpRule, Vendor, VendorOption

from models import onnxruntime_outputs, small_cnn


class Counting(CSourceCodegen):
    """The C-source codegen as a slow vendor compiler: it counts its runs."""

    cache_version = "npuc 1.0"
    declared_options = (VendorOption("tile", int, 8, "rows per tile"),)

    def __init__(self):
        self.runs = 0

    def compile(self, partitions, options):
        self.runs += 1
        return super().compile(partitions, options)


class CountingDnnl(DnnlCodegen):
    """dnnl's codegen (a runtime of its own, serialized modules), counting and cached."""

    cache_version = "1"
    runs = 0

    def compile(self, partitions, options):
        CountingDnnl.runs += 1
        return super().compile(partitions, options)


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def _npu(codegen):
    return Vendor("npu", tuple(OpRule(op.split(".")[-1], op) for op in
                               ("relax.nn.conv2d", "relax.add", "relax.nn.relu", "relax.nn.max_pool2d")), codegen)


def _matches(artifact, m):
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.testing.assert_allclose(artifact.run({"input": x})[0], onnxruntime_outputs(m, {"input": x})[0],
                               rtol=1e-4, atol=1e-5)


def test_a_second_build_runs_the_vendor_compiler_zero_times(_cache):
    m, codegen = small_cnn(), Counting()
    first = byoc.compile(m, [_npu(codegen)])
    assert codegen.runs == 1 and len(list(_cache.glob("*.bin"))) == 1
    second = byoc.compile(m, [_npu(codegen)])
    assert codegen.runs == 1, "the second build compiled again"
    assert [p.name for p in second.plan.partitions] == [p.name for p in first.plan.partitions]
    _matches(second, m)


def test_other_options_or_another_version_compile_again():
    m, codegen = small_cnn(), Counting()
    byoc.compile(m, [_npu(codegen)])
    byoc.compile(m, [_npu(codegen)], vendor_options={"npu": {"tile": 16}})
    assert codegen.runs == 2
    codegen.cache_version = "npuc 1.1"
    byoc.compile(m, [_npu(codegen)])
    assert codegen.runs == 3


def test_other_weights_compile_again():
    m, codegen = small_cnn(), Counting()
    byoc.compile(m, [_npu(codegen)])
    weight = m.graph.initializer[0]
    weight.raw_data = (np.frombuffer(weight.raw_data, np.float32) + 1).astype(np.float32).tobytes()
    artifact = byoc.compile(m, [_npu(codegen)])
    assert codegen.runs == 2
    _matches(artifact, m)


def test_a_damaged_entry_is_compiled_again(_cache):
    m, codegen = small_cnn(), Counting()
    byoc.compile(m, [_npu(codegen)])
    (entry,) = _cache.glob("*.bin")
    entry.write_bytes(entry.read_bytes()[:40])
    artifact = byoc.compile(m, [_npu(codegen)])
    assert codegen.runs == 2
    _matches(artifact, m)


def test_no_version_no_cache_and_off_is_off(_cache, monkeypatch):
    m = small_cnn()
    plain = Counting()
    plain.cache_version = ""
    byoc.compile(m, [_npu(plain)])
    assert not _cache.exists()
    monkeypatch.setenv(CACHE_ENV, "off")
    codegen = Counting()
    byoc.compile(m, [_npu(codegen)])
    byoc.compile(m, [_npu(codegen)])
    assert codegen.runs == 2 and not _cache.exists()


def test_a_runtime_modules_bytes_come_back_as_the_module():
    m = small_cnn()
    vendor = Vendor("dnnl", byoc.get_vendor("dnnl").rules, CountingDnnl(), targets=("x86_64",))
    byoc.compile(m, [vendor])
    runs = CountingDnnl.runs
    artifact = byoc.compile(m, [vendor])
    assert CountingDnnl.runs == runs
    _matches(artifact, m)


def test_a_cache_version_must_be_text():
    codegen = Counting()
    codegen.cache_version = 3  # on the instance: checked when the vendor is made from it
    with pytest.raises(byoc.VendorError, match="cache_version must be a string"):
        _npu(codegen)


def test_a_cache_that_cannot_be_written_costs_only_the_next_builds_time(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(CACHE_ENV, str(blocker / "cache"))  # a folder inside a file: every write fails
    m, codegen = small_cnn(), Counting()
    _matches(byoc.compile(m, [_npu(codegen)]), m)
    byoc.compile(m, [_npu(codegen)])
    assert codegen.runs == 2


def test_per_channel_scales_that_differ_past_what_numpy_prints_name_other_entries():
    """numpy's repr shortens arrays past 1,000 elements: the key reads every byte of a quantized unit's scales."""
    from types import SimpleNamespace

    from byoc.pipeline.build.codegen_cache import cache_key
    from byoc.vendor.ops import OpCall, QParams, QuantizedUnit, Tensor

    def graph(scales):
        x, y = Tensor(0, (1, 2048), "int8", "input"), Tensor(1, (1, 2048), "int8", "op")
        per_channel = QParams(scales, np.zeros(2048, np.int8), 1, "int8")
        unit = QuantizedUnit((per_channel,), per_channel, (-128, 127), ("relax.nn.relu",))
        call = OpCall("qnn.relu", [x], y, {}, "npu.relu", 0, unit)
        return SimpleNamespace(symbol="npu_0", inputs=[x], outputs=[y], dims={}, shape_arguments=[], options={},
                               dim_bounds={}, ops=[call], constants=[])

    scales = np.linspace(0.01, 0.02, 2048, dtype=np.float32)
    other = scales.copy()
    other[1024] *= 2
    assert repr(scales) == repr(other)  # what a key made of reprs would have seen
    codegen = Counting()
    assert cache_key(codegen, "npu", [graph(scales)], {}) != cache_key(codegen, "npu", [graph(other)], {})
    assert cache_key(codegen, "npu", [graph(scales)], {}) == cache_key(codegen, "npu", [graph(scales.copy())], {})
