"""The DuckDB adapter: the only package that imports duckdb."""
