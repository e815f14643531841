"""The area budgets of the core on ECP5: the one table ``rnic area`` checks and docs/area.md shows.

Each row names the instance subtrees of module ``rnic`` (paths as in ``rtl/rnic/top.py`` and
its layers, ``resp.psn_check`` for PSN Check in the responder layer, ``rx_parse.crc`` for RX
Parse's CRC unit) whose cells it counts; a subtree goes to the row with the longest matching
path. Whatever no row names is glue: counted in the total only. The layers
(:data:`LAYER_PATHS`) are composers: their own cells are glue, and their instances are blocks
like the instances of ``rnic``.

The budgets hold for the reference configuration :data:`REFERENCE` and for any configuration
no larger in any table (``num_qp``, ``num_cq``, ``key_entries``) at W = 64 or 128; at W = 128
the whole core may take :data:`TOTAL_LUT4_W128` LUT4. Other configurations have no budget.

``python -m rnic_flow.budgets [docs/area.md]`` rewrites the generated section of the doc
(``make docs`` runs it; ``tb/flow/test_area.py`` fails when the doc is stale).
"""

import sys
from dataclasses import dataclass

from .sections import update_section

__all__ = ["Budget", "BUDGETS", "TOTAL", "GLUE_PATHS", "LAYER_PATHS", "REFERENCE",
           "TOTAL_LUT4_W128", "budgets_for", "markdown", "update_doc", "DOC_BEGIN", "DOC_END"]


@dataclass(frozen=True)
class Budget:
    key: str           # the row's name in build/area.json
    title: str
    lut4: int          # LUT4-equivalents (rnic_flow.synth.area_from_cells)
    ff: int            # TRELLIS_FF
    dp16kd: int        # block RAMs
    paths: tuple = ()  # instance paths under ``rnic`` whose subtrees count here


#: The size parameters the budgets are set for (interface.md §1 defaults).
REFERENCE = {"data_width": 64, "num_qp": 256, "num_cq": 64, "key_entries": 64}

#: Whole-core LUT4-equivalents allowed at W = 128 (the datapath doubles; the tables do not).
TOTAL_LUT4_W128 = 18000

BUDGETS = (
    Budget("rx_parse", "RX Parse: checks, ICRC, frame buffer, realignment",
           2400, 1200, 5, ("rx_parse",)),
    Budget("receive", "receive engine: PSN Check, QP context, opcode/access/RNR/length rules, "
                      "pending ACK/NAK",
           1900, 1000, 4, ("resp.psn_check",)),
    Budget("rq_scatter", "RQ fetch (WQE prefetch), Scatter Path, invalidate step",
           1800, 1000, 3, ("resp.execute", "scatter")),
    Budget("key_cache", "Key Cache and its checks",
           1200, 600, 2, ("key_cache",)),
    Budget("cqe", "CQE Generation and the CQ table",
           700, 400, 1, ("resp.cqe_gen",)),
    Budget("requester", "requester with the Reliability Engine and READ placement",
           2800, 1500, 5, ("req.requester", "req.req_context", "req.read_place")),
    # the one TX frame builder (every frame: requests, ACK/NAKs, READ responses), the arbiter
    # ahead of it and the READ response engine
    Budget("tx", "TX: one frame builder and one ICRC generator for every frame, arbiter, "
                 "READ responses",
           2200, 900, 3, ("tx_arbiter", "tx_build", "read_resp")),
    Budget("axi", "host-memory AXI4 master",
           900, 700, 1, ("host_memory",)),
    Budget("control", "control plane",
           900, 500, 0, ("control",)),
)

TOTAL = Budget("total", "whole core, glue included", 15000, 8000, 24)

#: The instances of ``rnic`` that compose a layer of blocks (``rtl/rnic/resp/layer.py``,
#: ``rtl/rnic/req/layer.py``): their instances are matched to rows as those of ``rnic`` are.
LAYER_PATHS = ("resp", "req")

#: Instances of ``rnic`` and its layers that are glue on purpose (stream merges and skid buffers
#: between blocks, the ACK register of a core without READ); any other instance no row names is
#: reported as unmapped.
GLUE_PATHS = ("resp.cpl_merge", "resp.done_skid", "event_merge", "resp.fault_merge",
              "req.lookup_reg", "req.req_fault_merge", "req.ack_reg")


def budgets_for(config):
    """``{row key: Budget}`` (with ``"total"``) for ``config`` (a dict or RnicConfig), or None.

    None when the configuration is outside the budgeted range (see the module docstring).
    """
    if not isinstance(config, dict):
        config = {k: getattr(config, k) for k in REFERENCE}
    if config.get("data_width") not in (64, 128):
        return None
    if any(config.get(k, REFERENCE[k]) > REFERENCE[k] for k in ("num_qp", "num_cq",
                                                                  "key_entries")):
        return None
    out = {b.key: b for b in BUDGETS}
    total = TOTAL
    if config["data_width"] == 128:
        total = Budget(TOTAL.key, TOTAL.title, TOTAL_LUT4_W128, TOTAL.ff, TOTAL.dp16kd)
    out["total"] = total
    return out


def markdown():
    """The budget table as Markdown (the generated section of docs/area.md)."""
    ref = ", ".join(f"{t} = {REFERENCE[k]}" for t, k in (
        ("W", "data_width"), ("N", "num_qp"), ("C", "num_cq"), ("K", "key_entries")))
    lines = [f"Budgets at {ref} (LUT4: LUT4-equivalents, see above):", "",
             "| block | instances under `rnic` | LUT4 | FF | DP16KD |",
             "|---|---|--:|--:|--:|"]
    for b in (*BUDGETS, TOTAL):
        paths = ", ".join(f"`{p}`" for p in b.paths) or "everything"
        lines.append(f"| {b.title} | {paths} | {b.lut4:,} | {b.ff:,} | {b.dp16kd} |")
    layers = ", ".join(f"`{p}`" for p in LAYER_PATHS)
    lines += ["", f"At W = 128 the whole core may take {TOTAL_LUT4_W128:,} LUT4; the other "
                  "budgets are the same. Glue (no budget of its own, in the total): what is in "
                  f"module `rnic` and its layers ({layers}) themselves, "
              + ", ".join(f"`{p}`" for p in GLUE_PATHS)
              + ", and any instance no row names (listed as unmapped)."]
    return "\n".join(lines) + "\n"


DOC_BEGIN = ("<!-- generated by `python -m rnic_flow.budgets` from rtl/rnic_flow/budgets.py: "
             "begin -->")
DOC_END = "<!-- generated: end -->"


def update_doc(path):
    """Rewrite the generated section of ``path``; True when the file changed."""
    return update_section(path, DOC_BEGIN, DOC_END, "\n" + markdown())


if __name__ == "__main__":
    doc = sys.argv[1] if len(sys.argv) > 1 else "docs/area.md"
    print(f"{doc}: {'rewritten' if update_doc(doc) else 'up to date'}")
