"""Transmit side: the ACK/NAK frame builder and the TX arbiter, which merges its frames with the
requester's (``rnic.req.tx_build``) by whole frames."""
