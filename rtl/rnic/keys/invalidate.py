"""The Key Cache's invalidate unit: INVALIDATE and remote invalidation (IETH).

An invalidation is accepted for a valid fast-reg MR with no window bound (its valid bit is
cleared) and for a valid type 2 window (its valid bit is cleared and its MR's bound-window count
goes down by one); anything else, an unknown or already invalid key included, is refused with no
change (``docs/key_cache.md``, "INVALIDATE and remote invalidate").

The unit is the states of :func:`invalidate_states` inside the control FSM of
:class:`~rnic.keys.key_cache.KeyCache` (``rnic/keys/key_cache.py``), which it shares with the
commands: IDLE takes a request from the ``inval`` port or an INVALIDATE from the mailbox
(commands and invalidations take turns; ARGS reads the INVALIDATE's key from ARG0), DRAIN and
SEARCH1/SEARCH2 wait for the lookups to drain and search the CAM for the key, the states here
judge the slot found and clear its valid bit, RMW and RMW_WRITE count a type 2 window off its
MR, and RESPOND answers on ``inval.resp`` or the mailbox. The lookups are locked from the
request's acceptance until the table is updated, so a lookup accepted with or after the request
sees its effect. Remote invalidations come from Execute's stage 4 (:mod:`rnic.resp.execute`),
once the packet's last write beat is taken.
"""

from amaranth.hdl import Cat

from ..ifaces import Result

__all__ = ["invalidate_states"]


def invalidate_states(kc, m, t):
    """INVALIDATE's and the remote invalidate's states INV_SEARCHED … INV_OK, inside the control
    FSM of the Key Cache ``kc``, from the CAM search's result (``s3_hit``, ``s3_idx``) to the
    answer in RESPOND or REFUSE; a type 2 window goes through RMW first. ``t`` is the Key Cache's
    namespace of shared signals (:mod:`rnic.parts`)."""
    from .key_cache import KeyType      # (key_cache imports this module)
    ib, ce, cnt, result, ok_bit = t.ib, t.ce, t.cnt, t.result, t.ok_bit
    s3_hit, s3_idx, hidx = t.s3_hit, t.s3_idx, t.hidx
    v_we, v_idx, v_val = t.v_we, t.v_idx, t.v_val
    # -- INVALIDATE and remote invalidate
    with m.State("INV_SEARCHED"):
        m.d.sync += hidx.eq(s3_idx)
        with m.If(~s3_hit):
            m.next = "REFUSE"       # unknown or already invalid key
        with m.Else():
            m.next = "INV_READ"
    kc._read_row(m, t, "INV_READ", Cat(hidx, 1), "INV_CHECK")
    with m.State("INV_CHECK"):
        fr_ok = (ce.type == KeyType.FAST_REG_MR) & (ce.nwin == 0)
        mw2 = ce.type == KeyType.MW_TYPE2
        with m.If(fr_ok | mw2):
            m.d.comb += [v_we.eq(1), v_idx.eq(hidx), v_val.eq(0)]
        with m.If(fr_ok):
            m.next = "INV_OK"
        with m.Elif(mw2):
            kc._to_rmw(m, t, ce.mr[:ib], 0, 0)
            m.d.sync += cnt.eq(12)          # `w_word` is lane 5 of a command row
        with m.Else():
            m.next = "REFUSE"
    with m.State("INV_OK"):
        m.d.sync += [result.eq(Result.OK), ok_bit.eq(1)]
        m.next = "RESPOND"
