"""A few named errors that the edges (CLI, API, UI) translate into messages and exit codes."""

from __future__ import annotations


class RagError(Exception):
    """Base class of every error the assistant reports to a user."""


class ConfigError(RagError):
    """A setting is invalid or a configured resource cannot be used."""


class StoreUnavailable(RagError):
    """The vector store (embedded Chroma or a Chroma server) cannot be reached."""


class EmptyIndex(RagError):
    """The collection holds no chunks yet: run rag-ingest first."""

    @classmethod
    def of(cls, collection: str) -> EmptyIndex:
        """The error for this collection, with what to do."""
        return cls(f"collection {collection!r} is empty: run `rag-ingest PATH` first")


class LLMUnavailable(RagError):
    """The LLM server cannot be reached or did not answer in time."""


class Busy(RagError):
    """Every generation slot stayed taken for the queue timeout: try again shortly."""

    retry_after_s = 1


class Forbidden(RagError):
    """The principal's role does not allow this action (e.g. a reader uploading)."""


class NotFound(RagError):
    """No such thing that the principal may see (the same answer whether it exists or not)."""


class Conflict(RagError):
    """The action would overwrite something without being asked to (e.g. an upload over an existing document)."""


class InvalidDocument(RagError):
    """A file given to ingest cannot be read as a document (nothing stored changed)."""


class IngestBusy(RagError):
    """Another ingest (CLI run, upload, sync or delete) holds the index's write lock: try again when it ends."""

    retry_after_s = 5

    def __init__(self, message: str, running: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.running = running or {}  # what holds the lock: {"what", "pid", "since"}


class StoreInUse(RagError):
    """The embedded store is open in another process (a running server): one process at a time may use it."""


class ReadOnlyFolder(RagError):
    """A document's file cannot be changed in its folder (e.g. a read-only mount); nothing was changed."""
