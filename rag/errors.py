"""A few named errors that the edges (CLI, API, UI) translate into messages and exit codes."""


class RagError(Exception):
    """Base class of every error the assistant reports to a user."""


class ConfigError(RagError):
    """A setting is invalid or a configured resource cannot be used."""


class StoreUnavailable(RagError):
    """The vector store (embedded Chroma or a Chroma server) cannot be reached."""


class EmptyIndex(RagError):
    """The collection holds no chunks yet: run rag-ingest first."""


class LLMUnavailable(RagError):
    """The LLM server cannot be reached or did not answer in time."""
