"""The Key Cache: key-table CAM, memory registration, lookup checks and the invalidate unit."""

from .key_cache import (Access, InvalSignature, KeyCache, KeyType, LOOKUP_LATENCY,
                        LookupSignature, inval_req_layout, inval_resp_layout,
                        lookup_req_layout, lookup_resp_layout)

__all__ = [
    "Access", "InvalSignature", "KeyCache", "KeyType", "LOOKUP_LATENCY", "LookupSignature",
    "inval_req_layout", "inval_resp_layout", "lookup_req_layout", "lookup_resp_layout",
]
