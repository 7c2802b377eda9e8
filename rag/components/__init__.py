"""Adapters of the outside world behind the core's Protocols: Chroma, the keyword stores (SQLite, PostgreSQL), the
embedders, the LLM client, the feedback stores, files and locks."""
