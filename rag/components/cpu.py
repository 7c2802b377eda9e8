"""What the CPU computes natively (read from /proc/cpuinfo): picks bf16 for the embedder and the LLM server."""

from __future__ import annotations

from pathlib import Path

BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The CPU's feature flags (empty where /proc/cpuinfo is missing)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return frozenset()
    return frozenset(word for line in text.splitlines() if line.startswith("flags") for word in line.split()[2:])
