"""Work units to Arrow record batches: one row per cell, coordinates generated, in parallel."""
