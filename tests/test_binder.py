"""The Binder environment files install the package: a fresh virtual environment set up from
binder/requirements.txt and binder/postBuild imports tfbook (the launch buttons' promise).

Offline and fast: the fresh environment sees this environment's packages through a .pth file (as
if they were downloaded), so pip resolves binder/requirements.txt (and its constraints) without an
index, and postBuild installs tfbook from a copy of the repository.
"""
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def run(cmd, **kwargs):
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kwargs)
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    return result.stdout


def test_binder_files_follow_repo2docker():
    binder = ROOT / "binder"
    assert (binder / "runtime.txt").read_text().strip().startswith("python-3.")
    assert os.access(binder / "postBuild", os.X_OK) and os.access(binder / "start", os.X_OK)
    lines = (binder / "requirements.txt").read_text().splitlines()
    assert "-r ../requirements.txt" in lines and "-c ../constraints.txt" in lines


def test_fresh_environment_from_binder_files_imports_tfbook(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("pyproject.toml", "README.md", "requirements.txt", "constraints.txt"):
        shutil.copy(ROOT / name, repo / name)
    for name in ("tfbook", "binder"):
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    env_dir = tmp_path / "env"
    run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)])
    python = env_dir / "bin" / "python"
    site = pathlib.Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip())
    (site / "_reuse_downloads.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {**os.environ, "PATH": f"{env_dir / 'bin'}:{os.environ['PATH']}", "PIP_NO_INDEX": "1",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "VIRTUAL_ENV": str(env_dir)}
    env.pop("PYTHONPATH", None)
    run([str(python), "-m", "pip", "install", "-q", "-r", "binder/requirements.txt"], cwd=repo, env=env)
    run(["bash", "binder/postBuild"], cwd=repo, env=env)
    where = run([str(python), "-c", "import tfbook, tfbook.claims, tfbook.device; print(tfbook.__file__)"],
                cwd=tmp_path, env=env)
    assert pathlib.Path(where.strip()).is_relative_to(repo)
