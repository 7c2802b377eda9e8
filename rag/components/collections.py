"""Which Chroma collection holds a logical collection's vectors for one embedding model.

A model change (`rag-ingest --reembed`) builds a new collection beside the old one and registers it only when it is
complete: a process resolves (RAG_COLLECTION, RAG_EMBED_MODEL) to a collection once, at start, so servers still
running with the old model keep searching the old collection and processes started with the new model find the new
one. Unregistered pairs resolve to RAG_COLLECTION itself (every index built before this registry existed).
The registry is a JSON file in the index dir, written whole and swapped atomically, under the ingest lock.
"""

from __future__ import annotations

import copy
import json
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rag.core.errors import ConfigError

REGISTRY_FILE = "collections.json"
_LAST_READ: dict[Path, tuple[tuple[int, int, int], dict[str, Any]]] = {}  # registry path → (file version, content)
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]+")


@dataclass(frozen=True, slots=True)
class Replaced:
    """What registering a new generation retired and what it now frees."""

    kept: str  # the collection the same (collection, model) pair used before, kept for running processes
    dropped: tuple[str, ...]  # generations retired by an earlier re-embed, to delete now


class CollectionRegistry:
    """The (collection, model) → Chroma collection map of one index dir."""

    def __init__(self, index_dir: Path) -> None:
        self.path = index_dir / REGISTRY_FILE

    def _read(self) -> dict[str, Any]:
        try:
            seen = self.path.stat()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise ConfigError(f"cannot read the collection registry {self.path}: {exc}") from exc
        # Every write swaps in a new file (a new inode): the same inode, time and size is the same content. A
        # server resolves its collection on every request; a stat is what that costs while nothing changed.
        version = (seen.st_ino, seen.st_mtime_ns, seen.st_size)
        kept = _LAST_READ.get(self.path)
        if kept is not None and kept[0] == version:
            return kept[1]  # shared: readers only look; `register` changes a copy
        data = self._parse()
        _LAST_READ[self.path] = (version, data)
        return data

    def _parse(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read the collection registry {self.path}: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"the collection registry {self.path} is not a JSON object")
        return data

    def _write(self, data: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.name}.{secrets.token_hex(4)}")
        temporary.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(temporary, self.path)  # readers see the old file or the new one, never a half-written one

    def resolve(self, collection: str, model: str) -> str:
        """The Chroma collection serving `collection` for `model` (the name itself when none is registered)."""
        entry = self._read().get(collection, {})
        return str(entry.get("models", {}).get(model, collection))

    def current(self, collection: str) -> str:
        """The generation registered last (the collection itself before any re-embed): what a re-embed copies."""
        return str(self._read().get(collection, {}).get("current", collection))

    def generations(self, collection: str) -> set[str]:
        """Every Chroma collection this logical collection may have: itself, registered and retired ones."""
        entry = self._read().get(collection, {})
        return {collection, *entry.get("models", {}).values(), *entry.get("retired", [])}

    def new_name(self, collection: str, model: str) -> str:
        """A fresh Chroma collection name for a new generation (3-512 chars of [a-zA-Z0-9_-], as Chroma wants)."""
        slug = _UNSAFE.sub("-", model.rsplit("/", 1)[-1].removeprefix("bundled:")).strip("-_")[:40] or "model"
        return f"{collection}--{slug}--{secrets.token_hex(3)}"

    def register(self, collection: str, model: str, generation: str, source: str, source_model: str) -> Replaced:
        """Point (collection, model) at a completed generation copied from `source`; retire the one it replaces.

        The source stays registered for its own model, so a model change never drops the collection that processes
        still running with the old model search (and switching back costs nothing); only a generation replaced for
        the same model is retired, and dropped by the next re-embed."""
        data = copy.deepcopy(self._read())
        entry = data.setdefault(collection, {"models": {}, "retired": []})
        entry["models"].setdefault(source_model, source)
        previous = str(entry["models"].get(model, collection))
        dropped = tuple(name for name in entry.get("retired", []) if name not in {generation, previous})
        entry["models"][model] = generation
        entry["current"] = generation
        in_use = set(entry["models"].values())
        entry["retired"] = [previous] if previous not in in_use else []
        self._write(data)
        return Replaced(kept=previous, dropped=dropped)
