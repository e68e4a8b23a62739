"""Zarr metadata documents (v2 and v3) parsed once into frozen records."""
