"""RAG as hub agents: knowledge bases (``corpus``), the retriever and the generator
(``agents``), and the service that runs both (``service``)."""
