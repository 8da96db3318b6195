"""Remake every fixture folder under tests/data with the real ttnn wheels and torch.

    python tests/data/make/make_all.py            # from the checkout, in a venv with torch==2.13.0

Builds (or reuses) the cached ttnn venvs of ``tests/ttnn_env.py`` (0.62.2 on CPython 3.10, 0.81.1 on
3.12), downloads the ttnn 0.64.5 wheel once for its ``ttnn/database.py``, runs the scripts beside this
one in a scratch folder outside the checkout, and only when all of them succeeded replaces the
folders in tests/data. ``report-schemas/visualizer_empty_2024-09.sqlite`` is a file of the
ttnn-visualizer repository, not remade: its checksum is verified (tests/data/README.md).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent
sys.path.insert(0, str(DATA.parent))
from ttnn_env import TtnnEnv, build_ttnn_env, cache_dir

TORCH_VERSION = "2.13"
DATABASE_WHEEL = "0.64.5"  # the last ttnn whose report module still dumped tensors, as .tensorbin
DATABASE_PY_SHA256 = "24f75b8d5a26a234ea7ef03c40d336e9fe7b3e79d663119a4d08787e3e5b6738"
VISUALIZER_EMPTY = DATA / "report-schemas" / "visualizer_empty_2024-09.sqlite"
VISUALIZER_EMPTY_SHA256 = "51fe5dc2f3298fc7569078c94400b0a2feb0f859a95a5b9e7cd76e88952aebe8"  # blob 2a1fb5b1 of tenstorrent/ttnn-visualizer
FOLDERS = ["ttnn-0.62.2-bin", "ttnn-0.81.1-tensorbin", "ttnn-0.64.5-report-tensorbin", "torch-2.13-pt", "report-schemas"]


def run(python: Path | str, script: str, *args: str, cwd: Path, env: TtnnEnv | None = None) -> None:
    """Run one generator script; stop everything with its output when it fails."""
    quiet = {"PYTHONDONTWRITEBYTECODE": "1"}  # no __pycache__ beside the scripts
    proc = subprocess.run([str(python), str(HERE / script), *args], cwd=cwd, capture_output=True, text=True,
                          env=env.environ(quiet) if env else dict(os.environ, **quiet), timeout=1800)
    if proc.returncode != 0:
        sys.exit(f"{script} {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    print(f"{script} {' '.join(args)}: ok")


def database_py() -> Path:
    """ttnn/database.py of the ttnn 0.64.5 wheel, downloaded once into the venv cache and checked."""
    target = cache_dir() / f"ttnn-{DATABASE_WHEEL}-database.py"
    if not target.exists():
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "pip", "download", f"ttnn=={DATABASE_WHEEL}", "--no-deps",
                            "--only-binary=:all:", "--python-version", "3.10", "--platform", "manylinux_2_34_x86_64",
                            "-d", tmp], check=True)
            wheel = next(Path(tmp).glob("ttnn-*.whl"))
            with zipfile.ZipFile(wheel) as archive:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read("ttnn/database.py"))
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    if digest != DATABASE_PY_SHA256:
        sys.exit(f"{target}: sha256 {digest}, expected {DATABASE_PY_SHA256}; delete it to download again")
    return target


def main() -> None:
    import torch

    if not torch.__version__.startswith(TORCH_VERSION):
        sys.exit(f"torch {torch.__version__} here; the .pt fixtures are made with torch {TORCH_VERSION} "
                 f"(pip install torch=={TORCH_VERSION}.0)")
    digest = hashlib.sha256(VISUALIZER_EMPTY.read_bytes()).hexdigest()
    if digest != VISUALIZER_EMPTY_SHA256:
        sys.exit(f"{VISUALIZER_EMPTY}: sha256 {digest}, expected {VISUALIZER_EMPTY_SHA256} (see tests/data/README.md)")
    old, new = build_ttnn_env("0.62.2", "3.10"), build_ttnn_env("0.81.1", "3.12")
    legacy_database = database_py()
    with tempfile.TemporaryDirectory(prefix="reportdb-fixtures-") as tmp:
        scratch = Path(tmp)
        out = {name: scratch / name for name in FOLDERS}

        run(old.python, "ttnn_tensors.py", str(out["ttnn-0.62.2-bin"]), cwd=scratch, env=old)
        run(old.python, "ttnn_reports.py", str(out["ttnn-0.62.2-bin"]), cwd=scratch, env=old)
        run(new.python, "ttnn_tensors.py", str(out["ttnn-0.81.1-tensorbin"]), cwd=scratch, env=new)
        run(new.python, "ttnn_reports.py", str(out["ttnn-0.64.5-report-tensorbin"]), "--database-py", str(legacy_database),
            cwd=scratch, env=new)
        for name in ("ttnn-0.62.2-bin", "ttnn-0.64.5-report-tensorbin"):
            run(sys.executable, "torch_files.py", "goldens", str(out[name] / "report"), str(out[name] / "report_expected"),
                cwd=scratch)
        run(sys.executable, "torch_files.py", "pt", str(out["torch-2.13-pt"]), cwd=scratch)
        out["report-schemas"].mkdir()
        run(new.python, "graph_report_db.py", str(out["report-schemas"] / "ttnn_0.81.1_schema_3.5.sqlite"), cwd=scratch, env=new)
        shutil.copyfile(VISUALIZER_EMPTY, out["report-schemas"] / VISUALIZER_EMPTY.name)

        for name, folder in out.items():
            shutil.rmtree(DATA / name, ignore_errors=True)
            shutil.copytree(folder, DATA / name)
            print("replaced", DATA / name)


if __name__ == "__main__":
    main()
