"""Generated sections of the docs: text between a begin and an end marker that a command
rewrites (``make docs``) and a test compares with its rendering.

    new_text, changed = replace_section(text, begin, end, body)
    changed = update_section("docs/area.md", begin, end, body)
"""

from pathlib import Path

__all__ = ["replace_section", "update_section"]


def replace_section(text, begin, end, body, where="text"):
    """``text`` with what lies between ``begin`` and ``end`` replaced by ``body``, and whether
    that changed it. Raises ValueError when the markers are missing (``where`` names the
    page in the message)."""
    head, sep, rest = text.partition(begin)
    old, sep2, tail = rest.partition(end)
    if not sep or not sep2:
        raise ValueError(f"{where}: no generated section ({begin} ... {end})")
    return head + begin + body + end + tail, old != body


def update_section(path, begin, end, body, check=False):
    """Rewrite the section of the page ``path`` (unless ``check``); True when it differed."""
    path = Path(path)
    new, changed = replace_section(path.read_text(), begin, end, body, where=str(path))
    if changed and not check:
        path.write_text(new)
    return changed
