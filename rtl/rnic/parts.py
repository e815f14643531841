"""Composing a long ``elaborate()`` from parts.

A block whose ``elaborate()`` would be too long to read at once splits it into methods, one per
stage or unit. The parts share their signals through a namespace ``t``
(``types.SimpleNamespace``): each takes from it what it reads and returns a namespace of what it
makes, which :func:`add` puts into ``t``. ``elaborate()`` calls the parts in the order of the
pipeline, so the statements, and the generated Verilog, keep that order.
"""

__all__ = ["add"]


def add(t, part):
    """Add the signals and values of ``part`` (the namespace a part returns) to ``t``, the
    namespace the parts share; each name is made once (an ``AssertionError`` names a second)."""
    for name, value in vars(part).items():
        assert not hasattr(t, name), name
        setattr(t, name, value)
