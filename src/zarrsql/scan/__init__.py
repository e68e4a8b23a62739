"""The scan: a read request checked, its table opened, planned over the chunk grid and read.

Engine-neutral: nothing here imports DuckDB, and nothing imported by this package's
`__init__` needs pyarrow (the Arrow reader is `zarrsql.scan.reader`, loaded on use).
"""

from zarrsql.expand.columns import Column
from zarrsql.scan.contract import Plan, TableScan
from zarrsql.scan.entry import Scan, begin_coordinates, open_scan
from zarrsql.scan.opening import open_table
from zarrsql.scan.request import ReadRequest, read_request, storage_options_tuple

__all__ = [
    "Column",
    "Plan",
    "ReadRequest",
    "Scan",
    "TableScan",
    "begin_coordinates",
    "open_scan",
    "open_table",
    "read_request",
    "storage_options_tuple",
]
