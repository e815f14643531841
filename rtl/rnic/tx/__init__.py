"""Transmit side: the TX frame builder (``rnic.tx.build``), which builds every frame the core
sends (the requester's request packets and the responder's ACK/NAKs), and the TX arbiter ahead
of it, which picks whole frames."""
