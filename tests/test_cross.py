"""Cross targets: artifacts built for x86_64, ppc64le and s390x, run and checked against onnxruntime.

Every target's standalone program runs (natively on x86_64, under qemu-user
for the others) and is compared with onnxruntime on x86. Missing cross
compilers, C libraries and qemu are installed with apt-get (byoc.deploy.toolchain);
a test skips only when apt-get itself is unavailable.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import byoc
from byoc.deploy import toolchain
from byoc.deploy.standalone import c_program
from byoc.errors import StandaloneError, TargetError
from byoc.deploy.targets import resolve_target

from cross_models import inputs_for, mlp, small_cnn

TARGETS = ("x86_64", "ppc64le", "s390x")
RTOL, ATOL = 1e-4, 1e-5

# model name -> (builder, compile options). "cnn" keeps Sigmoid and Flatten on the host
# (BatchNormalization has no c_source rule), so TVM host kernels, a reshape view and
# C-source partitions alternate; "cnn_host" offloads nothing, so every weight is a
# host-kernel literal; "mlp" has two inputs, two outputs and a multi-output partition.
MODELS = {
    "cnn": (small_cnn, dict(vendors=["c_source"], keep_on_host=["Sigmoid", "Flatten"])),
    "cnn_host": (small_cnn, dict(vendors=[])),
    "mlp": (mlp, dict(vendors=["c_source"], keep_on_host=["Tanh"])),
}

# ELF e_machine and byte order (EI_DATA: 1 little, 2 big) each target must produce.
ELF = {"x86_64": (62, 1), "ppc64le": (21, 1), "s390x": (22, 2)}


@pytest.fixture(scope="module")
def toolchains():
    """Install whatever a target still needs; skip only when apt-get cannot be used."""
    found = {}

    def get(target):
        name = resolve_target(target).name
        if name not in found:
            try:
                found[name] = toolchain.install_missing(name)
            except toolchain.AptUnavailable as err:
                pytest.skip(f"the {name} toolchain is missing and cannot be installed: {err}")
        return found[name]

    return get


@pytest.fixture(scope="module")
def built():
    cache = {}

    def get(model_name, target):
        key = (model_name, target)
        if key not in cache:
            make, options = MODELS[model_name]
            model = make()
            cache[key] = (model, byoc.compile(model, target=target, **options))
        return cache[key]

    return get


def reference(model, inputs):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, inputs)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_emulated_matches_onnxruntime(model_name, target, built, toolchains):
    toolchains(target)
    model, artifact = built(model_name, target)
    inputs = inputs_for(model)
    outputs = artifact.run_emulated(inputs)
    expected = reference(model, inputs)
    assert [o.shape for o in outputs] == [e.shape for e in expected]
    for got, want in zip(outputs, expected):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("target", ["ppc64le:pwr10", "s390x:z15"])
def test_emulated_with_mcpu(target, toolchains):
    """mcpu reaches LLVM, and qemu runs the code with a matching CPU model (power10 for pwr10)."""
    toolchains(target)
    model = small_cnn()
    artifact = byoc.compile(model, ["c_source"], target=target, keep_on_host=["Sigmoid"])
    inputs = inputs_for(model)
    np.testing.assert_allclose(artifact.run_emulated(inputs)[0], reference(model, inputs)[0], rtol=RTOL, atol=ATOL)


def _raw_little_endian(name, array):
    """The wrong way to embed weights: their little-endian bytes, read back as the target's floats."""
    data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
    body = ", ".join(str(b) for b in data)
    return f"static const unsigned char {name}[{len(data)}] BYOC_ALIGNED = {{{body}}};"


@pytest.mark.parametrize("target, byte_order_matters", [("x86_64", False), ("s390x", True)])
def test_raw_little_endian_weights_break_only_big_endian(target, byte_order_matters, built, toolchains,
                                                         monkeypatch):
    """Negative control: byte-array weights are right on x86_64 and wrong on big-endian s390x.

    This is the mistake value literals avoid; the positive runs above use them.
    """
    toolchains(target)
    model, artifact = built("cnn_host", target)
    monkeypatch.setattr(c_program, "c_array", _raw_little_endian)
    inputs = inputs_for(model)
    got, want = artifact.run_emulated(inputs)[0], reference(model, inputs)[0]
    close = np.allclose(got, want, rtol=RTOL, atol=ATOL)
    assert close != byte_order_matters, f"largest error {np.nanmax(np.abs(got - want))}"


def _elf_header(path):
    data = path.read_bytes()[:20]
    assert data[:4] == b"\x7fELF"
    byte_order = data[5]
    machine = int.from_bytes(data[18:20], "little" if byte_order == 1 else "big")
    return machine, byte_order


@pytest.mark.parametrize("target", TARGETS)
def test_export_cross_links_a_shared_library(target, built, toolchains, tmp_path):
    toolchains(target)
    _, artifact = built("cnn", target)
    path = artifact.export(tmp_path / f"model-{target}.so")
    assert _elf_header(path) == ELF[target]
    assert data_shared_object(path)
    if shutil.which("file"):
        described = subprocess.run(["file", "-b", str(path)], capture_output=True, text=True).stdout
        expected = {"x86_64": ("LSB", "x86-64"), "ppc64le": ("LSB", "PowerPC"), "s390x": ("MSB", "S/390")}
        for word in expected[target]:
            assert word in described, described


def data_shared_object(path):
    """e_type is ET_DYN (3)."""
    data = path.read_bytes()[:18]
    return int.from_bytes(data[16:18], "little" if data[5] == 1 else "big") == 3


@pytest.mark.parametrize("target, package", [("ppc64le", "gcc-powerpc64le-linux-gnu"),
                                             ("s390x", "gcc-s390x-linux-gnu")])
def test_missing_cross_compiler_names_the_debian_package(target, package, built, toolchains, tmp_path,
                                                         monkeypatch):
    toolchains(target)
    _, artifact = built("mlp", target)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(TargetError, match=f"apt-get install .*{package}"):
        artifact.export(tmp_path / "model.so")
    with pytest.raises(TargetError, match="qemu-user"):
        artifact.run_emulated(inputs_for(mlp()))
    assert package in toolchain.missing_packages(target)


def test_missing_static_libc_names_the_cross_libc_package(tmp_path):
    preset = resolve_target("s390x")
    fake = type(preset)(**{**preset.__dict__, "sysroot": str(tmp_path)})
    with pytest.raises(TargetError, match="libc6-dev-s390x-cross"):
        fake.static_libc()


def test_unknown_target_and_mcpu_are_refused():
    with pytest.raises(TargetError, match="choose one of x86_64, ppc64le, s390x"):
        resolve_target("riscv64")
    with pytest.raises(TargetError, match="z13, z14, z15, z16"):
        resolve_target("s390x:pwr9")


@pytest.mark.parametrize("target", ["x86_64", "s390x"])
def test_one_c_source_build_runs_two_batch_sizes_under_qemu(target, toolchains, tmp_path):
    """A symbolic batch: the C-source partitions read it per call, so the C built once runs both shapes
    (the standalone program plans its host memory for the shape it is given)."""
    toolchains(target)
    model = small_cnn(batch="batch")
    artifact = byoc.compile(model, ["c_source"], target=target, keep_on_host=["Sigmoid"])
    assert {"conv1", "conv2", "gemm"} <= {n for p in artifact.plan.partitions for n in p.onnx_nodes}
    for batch in (1, 3):
        inputs = {"x": np.random.default_rng(batch).standard_normal((batch, 3, 16, 16)).astype(np.float32)}
        np.testing.assert_allclose(artifact.run_emulated(inputs)[0], reference(model, inputs)[0], rtol=RTOL,
                                   atol=ATOL)
    with pytest.raises(StandaloneError, match=r"dims=\{\.\.\.\} \(the model's dims: batch; missing batch\)"):
        artifact.export_standalone(tmp_path / "program")
    program = artifact.export_standalone(tmp_path / "program", dims={"batch": 2})
    assert (program.directory / "model.c").exists()


def test_cli_verify_runs_a_foreign_target_under_qemu(toolchains, tmp_path):
    """--verify on s390x builds the standalone program, runs it under qemu, compares with onnxruntime."""
    toolchains("s390x")
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(), path)
    run = subprocess.run([sys.executable, "-m", "byoc.partition", str(path), "--target", "s390x", "--verify"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "Verification: ok" in run.stdout
