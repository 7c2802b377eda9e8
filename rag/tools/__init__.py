"""Programs over the core and components: retrieval evaluation, the local LLM server, LangChain, model preparation."""
