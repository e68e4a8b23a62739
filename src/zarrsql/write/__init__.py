"""Writing results back: to xarray (`to_xarray`), to Zarr grids and tables (`to_zarr`).

This package sits above the engine: it runs relations on a zarrsql connection and streams
them in batches; it may import duckdb, pyarrow and zarr (xarray only inside the functions
that need it). `api` is the front door; `xarray_out` the pivot into a Dataset; `cells` the
coordinates and row placement both share; `grid` / `grid_append` the dense store writer;
`encoding` how a grid column is stored (CF time, fill values, compression);
`copy_statement` the SQL `COPY ... TO '...' (FORMAT zarr, ...)`; `table` and its modules
the table layout; `commit` and `lock` the crash-safe publication every writer goes through.
"""

from __future__ import annotations
