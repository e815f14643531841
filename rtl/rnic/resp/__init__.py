"""Responder: PSN Check with the QP context and the pending ACK/NAK table, and execute (Receive
Queue fetch, Scatter Path, the invalidate step). The Key Cache is ``rnic.keys``, CQE Generation
``rnic.host``."""
