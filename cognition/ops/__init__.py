"""Operating the service: health and readiness, metrics, request-scoped log context."""
