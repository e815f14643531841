"""Python model of PSN Check's per-QP pending-response table (``rtl/rnic/resp/ack_table.py``).

Responses are :class:`sim.models.responder.Frame` tuples ``(qpn, psn, syndrome, msn)``; a
positive ACK has syndrome 0x1F, anything else is a NAK.

* :func:`pending_reduce` — what the table sends for one QP's responses that were all pending at
  once: the newest ACK and the newest NAK, in the order they were decided.
* :func:`table_match` — whether the frames seen on the wire (``got``) can come out of the table
  for the responses the reference model decided (``expected``): per QP, ``got`` is a
  subsequence of ``expected`` (same order), every response left out is followed, in
  ``expected``, by a newer response of the same kind (ACK by ACK, NAK by NAK) of that QP, and the
  QP's last ACK and last NAK are sent. Frames of different QPs may interleave in any order.
* :func:`tail_reduced` — exact check of a stall: ``got`` for a QP equals some valid output for
  the responses decided before the stall followed by :func:`pending_reduce` of the rest.
"""

from collections import defaultdict

__all__ = ["pending_reduce", "table_match", "tail_reduced", "is_ack"]


def is_ack(f):
    return f.syndrome == 0x1F


def pending_reduce(items):
    """The table's frames for responses of ONE QP that were all pending together."""
    ack = nak = None
    for k, f in enumerate(items):
        if is_ack(f):
            ack = (k, f)
        else:
            nak = (k, f)
    return [f for _, f in sorted(x for x in (ack, nak) if x is not None)]


def _by_qp(frames):
    d = defaultdict(list)
    for f in frames:
        d[f.qpn].append(f)
    return d


def _qp_match(exp, got):
    # match got into exp as a subsequence, each got frame to the latest possible exp frame
    j = len(exp)
    matched = set()
    for g in reversed(got):
        j -= 1
        while j >= 0 and exp[j] != g:
            j -= 1
        if j < 0:
            return False
        matched.add(j)
    for k, e in enumerate(exp):
        if k in matched:
            continue
        if not any(is_ack(x) == is_ack(e) for x in exp[k + 1:]):
            return False            # the last ACK / last NAK may not be left out
    return True


def table_match(expected, got):
    """True when ``got`` can be the table's output for ``expected`` (see the module doc)."""
    e, g = _by_qp(expected), _by_qp(got)
    if set(g) - set(e):
        return False
    return all(_qp_match(e[q], g.get(q, [])) for q in e)


def tail_reduced(expected, got, max_prefix):
    """Per QP: ``got`` = (a valid output for expected[:j]) + pending_reduce(expected[j:]) for
    some j ≤ ``max_prefix`` — the frames after a long stall are exactly the reduced responses
    decided during it (``max_prefix``: the responses that may have left the table before the
    stall held it: what the TX frame builder holds)."""
    e, g = _by_qp(expected), _by_qp(got)
    for q, eq in e.items():
        gq = g.get(q, [])
        ok = False
        for j in range(min(len(eq), max_prefix) + 1):
            tail = pending_reduce(eq[j:])
            if len(tail) > len(gq) or gq[len(gq) - len(tail):] != tail:
                continue
            if _qp_match(eq[:j], gq[:len(gq) - len(tail)]):
                ok = True
                break
        if not ok:
            return False
    return True
