"""The first run as a new user meets it: the README's set-up command, verbatim, on a fresh venv.

Also: importing byoc and listing the vendors has no side effects (no file
written, no environment variable changed, no runtime library loaded).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import numpy as np
import onnx
import pytest

import byoc
from models import onnxruntime_outputs, random_inputs, small_cnn

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    """The README's ```sh blocks, in order: the set-up command, then the test command."""
    return re.findall(r"```sh\n(.*?)\n```", (ROOT / "README.md").read_text(), flags=re.S)


def test_import_and_list_vendors_have_no_side_effects(tmp_path):
    script = """
import json, os, sys
before = dict(os.environ)
import byoc
names = byoc.list_vendors()
maps = open("/proc/self/maps").read()
print(json.dumps({"names": names, "env_changed": dict(os.environ) != before,
                  "libraries": sorted({l.split("/")[-1] for l in maps.splitlines()
                                       if "libbyoc_" in l or "libdnnl" in l or "libgomp" in l})}))
"""
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), BYOC_CACHE_DIR=str(home / "byoc"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert {"c_source", "dnnl", "json_runtime"} <= set(result["names"])
    assert result["env_changed"] is False
    assert result["libraries"] == []  # nothing compiled, nothing loaded
    written = [str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")]
    assert written == ["home"]


def _tracked_tree(destination: Path) -> None:
    """Copy what a fresh clone would hold (tracked and new, non-ignored files; symlinks kept)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source, target = ROOT / name, destination / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the work tree, not yet committed
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs the git checkout to copy a clean tree from")
def test_readme_setup_command_verbatim_from_the_repo_root_of_a_fresh_copy(tmp_path):
    """``pip install . && ... --verify`` in a fresh venv, non-editable, run from the repo root.

    From the repo root ``python -m`` imports the source folder ``byoc/``
    ahead of the installed package, which is the trap this test keeps shut.
    """
    setup = _readme_commands()[0]
    assert setup.startswith("pip install . && ")
    clone = tmp_path / "clone"
    _tracked_tree(clone)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env['PATH']}"
    env["VIRTUAL_ENV"] = str(env_dir)
    done = subprocess.run(["bash", "-c", setup], cwd=clone, env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert "wrote small_cnn to small_cnn.onnx" in done.stdout
    assert "byoc partition report: small_cnn.onnx" in done.stdout
    assert "Verification: ok" in done.stdout, done.stdout[-3000:]
    # The package in the venv is a real install, not the source tree.
    where = subprocess.run([str(env_dir / "bin" / "python"), "-c", "import byoc; print(byoc.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout
    assert "site-packages" in where


def test_no_compiler_needed_to_partition_build_run_and_load_with_the_native_runtimes(tmp_path):
    """A deployment machine without gcc/g++: json_runtime and dnnl artifacts build, run and load."""
    model = small_cnn()
    onnx.save(model, tmp_path / "m.onnx")
    for vendor in ("dnnl", "json_runtime"):  # exported here, where the linker is
        byoc.compile(model, vendors=[vendor], keep_on_host=["fc"]).export(tmp_path / f"{vendor}.so")
    inputs = random_inputs(model)
    np.savez(tmp_path / "inputs.npz", **inputs)
    np.save(tmp_path / "want.npy", onnxruntime_outputs(model, inputs)[0])
    script = f"""
import shutil, numpy as np, byoc
assert shutil.which("gcc") is None and shutil.which("g++") is None and shutil.which("cc") is None
inputs = dict(np.load({str(tmp_path / 'inputs.npz')!r}))
want = np.load({str(tmp_path / 'want.npy')!r})
for vendor in ("dnnl", "json_runtime"):
    for keep in (["fc"], []):  # without a host op, TVM's host program would be an empty C module
        built = byoc.compile({str(tmp_path / 'm.onnx')!r}, vendors=[vendor], keep_on_host=keep)
        assert {{p.vendor for p in built.plan.partitions}} == {{vendor}}
        assert bool(built.plan.host_ops) == bool(keep) or vendor == "json_runtime"  # it has no Gemm rule
        np.testing.assert_allclose(built.run(inputs)[0], want, rtol=1e-4, atol=1e-5)
    loaded = byoc.load({str(tmp_path)!r} + f"/{{vendor}}.so")
    np.testing.assert_allclose(loaded.run(inputs)[0], want, rtol=1e-4, atol=1e-5)
print("ok")
"""
    env = dict(os.environ, PATH=str(Path(sys.executable).parent))  # the venv's bin: python, no compiler
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          cwd=Path(__file__).parent, timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
    cli = subprocess.run([sys.executable, "-m", "byoc.partition", str(tmp_path / "m.onnx"), "--vendor", "dnnl",
                          "--verify", "-q"], capture_output=True, text=True, env=env, timeout=600)
    assert cli.returncode == 0 and "Verification: ok" in cli.stdout, cli.stderr[-3000:]


def test_the_example_writer_runs_twice_and_never_replaces_a_users_file(tmp_path):
    def examples(*args):
        return subprocess.run([sys.executable, "-m", "byoc.examples", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)

    assert examples("small_cnn.onnx").stdout.strip() == "wrote small_cnn to small_cnn.onnx"
    written = (tmp_path / "small_cnn.onnx").read_bytes()
    assert examples("small_cnn.onnx").stdout.strip() == "small_cnn.onnx already holds small_cnn"
    assert (tmp_path / "small_cnn.onnx").read_bytes() == written
    (tmp_path / "mine.onnx").write_bytes(b"the user's model")
    refused = examples("mine.onnx")
    assert refused.returncode == 2 and "already exists and is not the small_cnn example" in refused.stderr
    assert (tmp_path / "mine.onnx").read_bytes() == b"the user's model"


def test_byoc_imports_and_loads_without_importing_torch(tmp_path):
    """tvm-ffi and tvm.relax import torch when it is installed, which tripled byoc.load's time in a fresh
    process; byoc hides it from them. A torch that refuses to be imported proves nothing reached it."""
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise RuntimeError('torch was imported')\n")
    model = small_cnn()
    artifact = byoc.compile(model, vendors=["dnnl"])
    artifact.export(tmp_path / "m.so")
    inputs = random_inputs(model)
    np.savez(tmp_path / "inputs.npz", **inputs)
    script = f"""
import sys, numpy as np, byoc
assert "torch" not in sys.modules
loaded = byoc.load({str(tmp_path / 'm.so')!r})
print(loaded.run(dict(np.load({str(tmp_path / 'inputs.npz')!r})))[0].shape)
assert "torch" not in sys.modules
try:
    import torch
except RuntimeError as err:
    print(err)  # the user's own import of torch still reaches it
"""
    env = dict(os.environ, PYTHONPATH=f"{tmp_path / 'site'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:2] == [str(artifact.run(inputs)[0].shape), "torch was imported"]
