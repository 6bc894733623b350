"""The aifab wheel an MLflow model carries, so its environment can be built from the model alone.

aifab is on no package index: a model whose ``requirements.txt`` said ``aifab==0.1.0`` could
not be installed by ``mlflow models serve`` with a virtualenv or uv environment. The model
instead carries a wheel of the aifab package it was logged with (``wheels/...whl``, referenced
by that relative path: MLflow installs the requirements from inside the model directory), and
pip resolves aifab's own dependencies from the wheel's metadata.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from importlib.metadata import distribution
from pathlib import Path

__all__ = ["WHEELS_DIR", "write_aifab_wheel"]

#: Where in the MLflow model directory the wheel lies.
WHEELS_DIR = "wheels"
#: A fixed timestamp: the same sources make the same wheel bytes.
_EPOCH = (2020, 1, 1, 0, 0, 0)


def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def write_aifab_wheel(out_dir: Path) -> Path:
    """Write a wheel of the aifab package as imported now into ``out_dir``.

    Its files are the package's (sources and package data, no caches); its metadata is the
    installed distribution's (name, version, ``Requires-Dist``, entry points). Built by
    zipping, not by a build backend: it works for editable and wheel installs alike, offline,
    in well under a second.

    Returns:
        The wheel's path (``aifab-<version>-py3-none-any.whl``).
    """
    import aifab

    package = Path(aifab.__file__).resolve().parent
    dist = distribution("aifab")
    info = f"aifab-{dist.version}.dist-info"
    extra = {
        f"{info}/METADATA": dist.read_text("METADATA") or f"Name: aifab\nVersion: {dist.version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: aifab\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
        f"{info}/entry_points.txt": dist.read_text("entry_points.txt") or "",
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"aifab-{dist.version}-py3-none-any.whl"
    records = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as whl:
        for file in sorted(package.rglob("*")):
            if not file.is_file() or "__pycache__" in file.parts or file.suffix == ".pyc":
                continue
            arcname = f"aifab/{file.relative_to(package).as_posix()}"
            data = file.read_bytes()
            whl.writestr(zipfile.ZipInfo(arcname, _EPOCH), data)
            records.append(_record_line(arcname, data))
        for arcname, text in extra.items():
            data = text.encode("utf-8")
            whl.writestr(zipfile.ZipInfo(arcname, _EPOCH), data)
            records.append(_record_line(arcname, data))
        records.append(f"{info}/RECORD,,")
        whl.writestr(zipfile.ZipInfo(f"{info}/RECORD", _EPOCH), "\n".join(records) + "\n")
    return path
