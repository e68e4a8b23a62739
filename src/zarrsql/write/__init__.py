"""Writing query results back to Zarr: the table layout, the grid layout and their shared
crash-safe commit machinery (`commit`, `lock`). Sits above the engine; it may import duckdb,
pyarrow and zarr (xarray only inside the functions that need it)."""
