"""Transmit side: header builder (ACK/NAK and, later, requester frames) and TX arbiter."""
