"""The version a cube records is tokensweep's own, baked in when the package is built.

A user's venv often sits inside their own paper repository. The package is built from a
tokensweep repository (a copy of this tree, committed and tagged in a temporary git repository)
and installed into a folder inside another git repository; the version it reports there is
the tag and commit it was built from, never the surrounding repository's. A copy without git
metadata (an unpacked tarball) built inside that repository gets the fallback version.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # two real pip builds
SOURCE = Path(__file__).resolve().parent.parent
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": os.devnull}


def git(folder: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True,
                         env={**os.environ, **GIT_ENV}, check=True)
    return out.stdout.strip()


def commit_all(folder: Path, message: str) -> str:
    git(folder, "init", "-q")
    git(folder, "add", "-A")
    git(folder, "commit", "-q", "-m", message)
    return git(folder, "rev-parse", "HEAD")


def copy_of_package(target: Path) -> Path:
    """This tree's package files (no venv, stores or caches)."""
    ignore = shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__", "results",
                                    "*.zarr", "_version.py", ".pytest_cache", ".hypothesis",
                                    "tests", "benchmarks", "docs")
    shutil.copytree(SOURCE, target, ignore=ignore, symlinks=True)
    return target


def install(source: Path, target: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-cache-dir", "--target", str(target), str(source)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def version_seen_from(site: Path, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", "import tokensweep.pipeline.store.provenance as p, tokensweep as t; "
                               "print(p.code_version(), '|', t.__version__, '|', p.__file__)"],
        cwd=cwd, env={**env, "PYTHONPATH": str(site)}, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    code, plain, where = (part.strip() for part in result.stdout.split("|"))
    assert Path(where).is_relative_to(site), where  # the installed copy, not this tree
    return code, plain


def test_version_is_the_builds_not_the_surrounding_repositorys(tmp_path):
    source = copy_of_package(tmp_path / "tokensweep-src")
    built = commit_all(source, "tokensweep at some commit")
    git(source, "tag", "v7.7.7")
    paper = tmp_path / "paper"
    paper.mkdir()
    (paper / "paper.tex").write_text("\\documentclass{article}\n")
    theirs = commit_all(paper, "the user's own paper")

    install(source, paper / ".venv-site")
    code, plain = version_seen_from(paper / ".venv-site", cwd=paper)
    assert plain == "7.7.7" and code.startswith("7.7.7 (commit "), code
    commit = code.removeprefix("7.7.7 (commit ").removesuffix(")")
    assert len(commit) >= 7 and built.startswith(commit) and not theirs.startswith(commit), code

    # an unpacked tarball (no git metadata) built inside the user's repository
    tarball = copy_of_package(paper / "vendor" / "tokensweep-7.7.7")
    install(tarball, paper / ".venv-site2")
    code, plain = version_seen_from(paper / ".venv-site2", cwd=paper)
    assert plain == "0.0.0" and code == "0.0.0", code  # nothing of the paper's commit
