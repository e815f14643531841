"""Composing a long ``elaborate()`` from parts.

A block whose ``elaborate()`` would be too long to read at once splits it into methods, one per
stage or unit. The parts share their signals through a namespace ``t``
(``types.SimpleNamespace``): each takes from it what it reads and returns a namespace of what it
makes, which :func:`add` puts into ``t``. ``elaborate()`` calls the parts in the order of the
pipeline, so the statements, and the generated Verilog, keep that order.

A composer (the top, a layer) declares its ports as members of its blocks' signatures and
connects each to its block with :func:`pass_through`.
"""

__all__ = ["add", "pass_through"]


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
