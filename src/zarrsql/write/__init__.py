"""Writing results back: to xarray (`to_xarray`), to Zarr grids and tables (`to_zarr`).

This package sits above the engine: it runs relations on a zarrsql connection and streams
them in batches. `api` is the front door; `xarray_out` the pivot into a Dataset; `cells`
the coordinates and row placement both share; `grid` the dense store writer; `encoding`
how each column is stored (CF time, fill values, compression); `copy_statement` the SQL
`COPY ... TO '...' (FORMAT zarr, ...)`.
"""

from __future__ import annotations
