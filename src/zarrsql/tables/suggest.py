"""The nearest of some names to one that is not among them, for "did you mean" hints.

An error that rejects a name (a table, a group path) offers the nearest existing spelling
as difflib measures it, ignoring letter case, the way a misspelt parameter name is answered.
A name that differs only in letter case is the nearest of all.
"""

from __future__ import annotations

from collections.abc import Iterable

#: How alike (difflib's ratio, 0 to 1) a name must be to be offered.
CUTOFF = 0.5


def closest(name: str, names: Iterable[str], cutoff: float = CUTOFF) -> str | None:
    """The name among `names` nearest to `name` ignoring case, as spelled in `names`; None
    when none is alike enough."""
    spelled: dict[str, str] = {}
    for n in names:
        spelled.setdefault(n.lower(), n)
    if name.lower() in spelled:
        return spelled[name.lower()]
    import difflib  # only for a name that is not there (0.4 MB a read that selects never needs)

    near = difflib.get_close_matches(name.lower(), list(spelled), n=1, cutoff=cutoff)
    return spelled[near[0]] if near else None
