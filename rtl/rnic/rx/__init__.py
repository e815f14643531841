"""Receive path of the RoCEv2 core: RX Parse (frame checks, ICRC, store-and-forward buffer)."""

from .parse import RxParse, rx_parse_latency

__all__ = ["RxParse", "rx_parse_latency"]
