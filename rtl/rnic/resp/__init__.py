"""Responder: QP context and PSN Check (later: Key Cache, RQ fetch, scatter, CQE)."""
