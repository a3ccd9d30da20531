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

import pytest

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
