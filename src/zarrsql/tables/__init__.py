"""Tables: one per group and set of dimension names and shape; selecting one by parameters."""
