"""Composing a long ``elaborate()`` from parts.

A block whose ``elaborate()`` would be too long to read at once splits it into methods, one per
stage or unit. The parts share their signals through a namespace ``t``
(``types.SimpleNamespace``): each takes from it what it reads and returns a namespace of what it
makes, which :func:`add` puts into ``t``. ``elaborate()`` calls the parts in the order of the
pipeline, so the statements, and the generated Verilog, keep that order.

A composer (the top, a layer) declares its ports as members of its blocks' signatures and
connects each to its block with :func:`pass_through`.

Idioms the parts of several blocks share: :func:`one_hot`, :func:`low_mask` and
:func:`split_eq`.
"""

__all__ = ["add", "low_mask", "one_hot", "pass_through", "split_eq"]


def one_hot(*fsms):
    """One flip-flop per state of each ``fsm`` (an ``m.FSM``) in synthesis: the state decodes
    in front of an FSM's enables and next-state logic are then single flip-flops. The simulated
    Verilog is the same (a synthesis attribute only)."""
    for fsm in fsms:
        fsm.state.attrs["fsm_encoding"] = "one-hot"


def low_mask(log2, width=16):
    """``(1 << log2) - 1`` on ``width`` bits without a carry chain: bit i is ``log2 > i``, one
    compare a bit (a ring index masked by its ring's log2 size)."""
    from amaranth.hdl import Cat
    return Cat(*[log2 > i for i in range(width)])


def split_eq(m, a, b, name, part=32):
    """``a == b`` of the cycle before, compared in registered parts of at most ``part`` bits
    (one register bit each, the signal ``name``) and ANDed where it is used: a 32-bit compare
    is three LUT levels, a wide one's last levels would not fit behind it."""
    from amaranth.hdl import Signal
    assert len(a) == len(b), (len(a), len(b))
    cuts = [(k, min(k + part, len(a))) for k in range(0, len(a), part)]
    eqs = Signal(len(cuts), name=name)
    m.d.sync += [eqs[i].eq(a[lo:hi] == b[lo:hi]) for i, (lo, hi) in enumerate(cuts)]
    return eqs.all()


def add(t, part):
    """Add the signals and values of ``part`` (the namespace a part returns) to ``t``, the
    namespace the parts share; each name is made once (an ``AssertionError`` names a second)."""
    for name, value in vars(part).items():
        assert not hasattr(t, name), name
        setattr(t, name, value)


def pass_through(m, outer, name, inner, port):
    """Connect port ``name`` of the composer ``outer`` to port ``port`` of its submodule
    ``inner``, whose member it is (same flow, same signature): an interface with
    ``wiring.connect``, a plain port by an assignment in the direction of its flow."""
    from amaranth.lib import wiring
    ours, theirs = getattr(outer, name), getattr(inner, port)
    member = outer.signature.members[name]
    if not member.is_port:
        wiring.connect(m, wiring.flipped(ours), theirs)
    elif member.flow == wiring.Out:
        m.d.comb += ours.eq(theirs)
    else:
        m.d.comb += theirs.eq(ours)
