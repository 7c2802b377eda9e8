"""The domain: access rules, the query path (retrieve, answer, grounding, prompts), and the Protocols it consumes
(ports). Imports no adapter, no web, UI or CLI framework."""
