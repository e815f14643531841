"""Transmit side: the TX frame builder (``rnic.tx.build``), which builds every frame the core
sends (the requester's request packets, the responder's ACK/NAKs and READ responses), the READ
response engine (``rnic.tx.read_resp``), which turns READ jobs into response frames merged with
the ACK/NAKs, and the TX arbiter ahead of the builder (``rnic.tx.arbiter``), which picks whole
frames and routes their gather chunks."""
