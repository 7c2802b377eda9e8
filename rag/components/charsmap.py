"""SentencePiece's precompiled charsmap (the `tokenizers` Precompiled normalizer's input) built from a mapping.

`tokenizers` can only read one (from a .model file); this writes one for any string -> string map, so a
per-character normalization runs in one pass instead of one `Replace` per distinct output.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import numpy.typing as npt


def _trie(keys: dict[bytes, int]) -> dict[int, Any]:
    """A byte trie: child byte -> subtrie, and -1 -> the value of the key ending there."""
    root: dict[int, Any] = {}
    for key, value in keys.items():
        node = root
        for byte in key:
            node = node.setdefault(byte, {})
        node[-1] = value
    return root


def _double_array(keys: dict[bytes, int]) -> npt.NDArray[np.uint32]:
    """The darts-clone double array SentencePiece's precompiled charsmap holds (as `tokenizers` reads it).

    A node at p with base b has its child for byte c at b ^ c (unit: label c, has-leaf bit 8, offset p ^ b
    in bits 10+) and its value at b (bit 31 set). Bases are unique, so a label check cannot pass by accident.
    """
    size = 1 << 21  # offsets are stored in 21 bits
    units, used, bases = np.zeros(size, np.uint32), np.zeros(size, bool), np.zeros(size, bool)
    used[0], stack, free = True, [(0, _trie(keys))], 1
    while stack:
        pos, node = stack.pop()
        labels = np.array(sorted(0 if c == -1 else c for c in node), dtype=np.int64)
        while used[free]:
            free += 1
        base = _find_base(used, bases, labels, free)
        bases[base], used[base ^ labels] = True, True
        units[pos] |= ((pos ^ base) << 10) | (int(-1 in node) << 8)
        units[base ^ labels] = labels
        if -1 in node:
            units[base] = (1 << 31) | node[-1]
        stack.extend((base ^ int(c), node[int(c)]) for c in labels if c)
    return units[: int(np.flatnonzero(units)[-1]) + 1]


def _find_base(
    used: npt.NDArray[np.bool_], bases: npt.NDArray[np.bool_], labels: npt.NDArray[np.int64], start: int
) -> int:
    """The lowest unused base from about `start` whose slots for `labels` are all free, a window at a time."""
    for low in range(start - start % 4096, len(used) - 8192, 4096):
        candidates = np.arange(low, low + 4096)
        fits = ~used[candidates[:, None] ^ labels[None, :]].any(axis=1) & ~bases[candidates]
        if fits.any():
            return low + int(np.argmax(fits))
    raise ValueError("the mapping does not fit a 21-bit double array")


def precompiled_charsmap(mapping: dict[str, str]) -> bytes:
    """A precompiled charsmap for `mapping`: u32 trie size, the double array, NUL-terminated replacements."""
    blob, where = bytearray(), {}
    for output in sorted(set(mapping.values())):
        where[output] = len(blob)
        blob += output.encode("utf-8") + b"\0"
    units = _double_array({char.encode("utf-8"): where[output] for char, output in mapping.items()})
    return struct.pack("<I", 4 * len(units)) + units.astype("<u4").tobytes() + bytes(blob)
