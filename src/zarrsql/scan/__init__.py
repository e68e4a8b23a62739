"""The scan: a read request checked, its table opened, planned over the chunk grid and read.

Engine-neutral: nothing here imports DuckDB, and nothing imported by this package's
`__init__` needs pyarrow (the Arrow reader is `zarrsql.scan.reader`, loaded on use).
"""

from zarrsql.scan.opening import open_table
from zarrsql.scan.request import ReadRequest, read_request, storage_options_tuple
from zarrsql.scan.table import Column, TableScan

__all__ = ["Column", "ReadRequest", "TableScan", "open_table", "read_request", "storage_options_tuple"]
