"""A set of generated stores looked up by name and Zarr format, shared by the test folders
that write their own fixtures (AnnData, the table convention)."""

from __future__ import annotations

from pathlib import Path


class Stores:
    """`stores("csr.zarr", 3)` → the path of that store in Zarr format 3 (a str for SQL)."""

    def __init__(self, paths: dict[str, Path], kind: str) -> None:
        self.paths = paths
        self.kind = kind

    def __call__(self, name: str, fmt: int = 3) -> str:
        key = f"v{fmt}/{name}"
        if key not in self.paths:
            raise FileNotFoundError(f"no {self.kind} fixture {key!r}; known: {sorted(self.paths)}")
        return str(self.paths[key])
