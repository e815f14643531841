"""docs/host_memory_formats.md is what sim/formats.py renders from rnic.formats (not stale)."""

import rnic.formats as formats
from sim.formats import markdown
from sim.runner import ROOT


def test_formats_doc_current():
    assert (ROOT / "docs" / "host_memory_formats.md").read_text() == markdown(), \
        "docs/host_memory_formats.md is stale: run make formats-doc"


def test_formats_doc_follows_the_table(monkeypatch):
    """A change of the definition table changes the page (so the test above can fail)."""
    before = markdown()
    fmt = formats.CQE_FORMAT
    moved = [f._replace(size=1) if f.name == "rsvd" else f for f in fmt.fields]
    monkeypatch.setattr(fmt, "fields", moved)
    assert markdown() != before
    assert "| 23 | `rsvd` | reserved |" in markdown()
