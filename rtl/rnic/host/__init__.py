"""Host-memory side of the core: the shared AXI4 master and CQE Generation."""

from .axi_master import (HostMemory, AxiSignature, ReadClientSignature, WriteClientSignature,
                         req_layout, read_beat_layout, write_beat_layout, done_layout)
from .cqe_gen import CqeGen, cqe_layout

__all__ = ["HostMemory", "AxiSignature", "ReadClientSignature", "WriteClientSignature",
           "req_layout", "read_beat_layout", "write_beat_layout", "done_layout",
           "CqeGen", "cqe_layout"]
