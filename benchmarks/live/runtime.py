"""The interpreter karpy runs under in the live benchmark: a virtualenv holding only karpy's own dependencies.

The image (``Dockerfile``) installs karpy without extras. The development virtualenv also holds the ``test``
extra, and one of its packages pulls in ``rich`` (import-linter needs it); structlog imports ``rich`` whenever it
is installed: ~0.3 s of start-up and 5 MiB more after karpy's imports (26 vs 21 MiB peak), though only ~1 MiB of
the live run's peak (121 vs 122 MiB at 1,000 pods). karpy's peak RSS against Karpenter's should be what ships, so
the benchmark's karpy runs from ``$KARPY_LIVE_VENV`` (default ``~/.cache/karpy-live-venv``): ``pip install -e
<repository>``, no extras, made once and made again when ``pyproject.toml`` changes (its SHA-256 is kept in the
virtualenv as ``.stamp``). Editable, so the code measured is the working tree's.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
DEFAULT_VENV = Path.home() / ".cache" / "karpy-live-venv"
STAMP = ".stamp"


def stamp_of(pyproject: Path) -> str:
    """SHA-256 (hex) of ``pyproject.toml``: what the virtualenv's dependencies were installed from."""
    return hashlib.sha256(pyproject.read_bytes()).hexdigest()


def is_current(venv: Path, pyproject: Path) -> bool:
    """Whether ``venv`` was made from this ``pyproject.toml`` and still has its interpreter."""
    stamp = venv / STAMP
    return (venv / "bin" / "python").is_file() and stamp.is_file() and stamp.read_text() == stamp_of(pyproject)


def runtime_python(repository: Path = REPOSITORY, venv: Path | None = None) -> Path:
    """Path of the runtime virtualenv's ``python``, made (or made again) first when it is not current.

    Raises ``subprocess.CalledProcessError`` when ``venv`` or ``pip`` fail (pip's output is on stderr)."""
    venv = venv or Path(os.environ.get("KARPY_LIVE_VENV", str(DEFAULT_VENV)))
    pyproject = repository / "pyproject.toml"
    if not is_current(venv, pyproject):
        print(f"== karpy's runtime virtualenv in {venv} (karpy's dependencies only, as the image)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "-e", str(repository)], check=True, stdout=sys.stderr)
        (venv / STAMP).write_text(stamp_of(pyproject))
    return venv / "bin" / "python"
