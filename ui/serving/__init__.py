"""The serving layer that the HTTP API and the chat share: who is asking, the generation gate, the query path for
one request, and the document use cases. It raises the core's domain errors (Busy, Forbidden, NotFound, Conflict);
each edge maps them to its medium (HTTP statuses, chat messages)."""
