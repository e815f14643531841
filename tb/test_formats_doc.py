"""docs/host_memory_formats.md is what sim/formats.py generates from the driver (not stale)."""
from pathlib import Path

from sim.formats import markdown

ROOT = Path(__file__).resolve().parent.parent


def test_formats_doc_current():
    assert (ROOT / "docs" / "host_memory_formats.md").read_text() == markdown(), \
        "docs/host_memory_formats.md is stale: run make formats-doc"


def test_formats_match_contract():
    """Spot checks against interface.md §5, independent of the driver."""
    from sim.formats import cqe_fields, recv_wqe_fields, send_wqe_fields
    r = dict(recv_wqe_fields())
    assert r["wr_id"] == list(range(8)) and r["SGE 2 lkey"] == list(range(60, 64))
    s = dict(send_wqe_fields())
    assert s["rkey (RDMA WRITE)"] == list(range(24, 28)) and s["num_sge"] == [10]
    c = {k.split(" ")[0]: v for k, v in cqe_fields()}
    assert c["byte_len"] == list(range(8, 12)) and c["status"] == [20] and c["phase"] == [31]
