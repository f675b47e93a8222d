"""The hermes-gateway service: HTTP API, channels, routing, approvals, scheduler, CLI."""

__all__: list[str] = []
