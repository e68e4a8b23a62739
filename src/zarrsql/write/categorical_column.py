"""Dictionary-encoded table columns (DuckDB ENUM, pandas categorical, text appended to one).

Codes are integers (-1 for NULL) into categories that only ever grow, so an append adds its
new words at the end and never renumbers rows already written. A short list lives in the
codes array's attributes; a longer one is a `categorical` group tagged as AnnData tags it, so
anndata reads the group as its own categorical.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from zarrsql.errors import AppendSchemaError, UnwritableColumnError
from zarrsql.write.column_arrays import VERTEX_CHUNK, Layout, create_array, grow

#: Most categories kept in the codes array's attributes; more go to a `categorical` group
#: (the convention's advice: inline only for a small list).
INLINE_CATEGORIES = 64
_ANNDATA_CODES = {"encoding-type": "array", "encoding-version": "0.2.0"}
_ANNDATA_CATEGORIES = {"encoding-type": "string-array", "encoding-version": "0.2.0"}


@dataclass
class CategoricalColumn:
    """Dictionary-encoded values: integer codes into categories that only ever grow."""

    name: str
    node: str
    layout: Layout
    categories: list[Any] = field(default_factory=list)
    lookup: dict[Any, int] = field(default_factory=dict)
    codes: Any = None
    stored: Any = None  # the categories array (a categorical group), or None (inline)
    inline: bool = True

    def create(self, first: pa.DictionaryArray | None) -> None:
        size = len(first.dictionary) if first is not None else 0
        self.inline = size <= INLINE_CATEGORIES
        dtype = np.int8 if size < 100 else (np.int16 if size < 30000 else np.int32)
        dims = [self.layout.row_dim]
        if self.inline:
            self.codes = create_array(
                self.layout,
                self.layout.group,
                self.node,
                dtype,
                (),
                self.layout.chunk,
                attrs={"type": "string", "categories": [], "ordered": False},
                dims=dims,
                fill=-1,
            )
            return
        group = self.layout.group.create_group(
            self.node,
            attributes={
                "type": "string",
                "encoding-type": "categorical",
                "ordered": False,
                "encoding-version": "0.2.0",
            },
        )
        # AnnData's element tags on the children, so that anndata reads the group as its own
        codes, categories = _ANNDATA_CODES, _ANNDATA_CATEGORIES
        self.codes = create_array(
            self.layout, group, "codes", dtype, (), self.layout.chunk, attrs=codes, dims=dims, fill=-1
        )
        self.stored = create_array(
            self.layout,
            group,
            "categories",
            object,
            (),
            VERTEX_CHUNK,
            attrs=categories,
            dims=[f"{self.node}_categories"],
        )

    def open(self, node: Any) -> None:
        import zarr

        if isinstance(node, zarr.Group):
            self.inline, self.codes, self.stored = False, node["codes"], node["categories"]
            self.categories = list(self.stored[:].tolist())
        else:
            self.codes = node
            self.categories = list(node.attrs.get("categories", []))
        if self.codes.dtype.kind not in "iu" or any(not isinstance(c, str) for c in self.categories):
            raise AppendSchemaError(
                f"column '{self.name}' is stored as categories of another kind than text; append "
                "the column as it is stored (see read_zarr_metadata)"
            )
        self.lookup = {c: i for i, c in enumerate(self.categories)}

    def write(self, block: pa.ChunkedArray, start: int) -> None:
        parts = [self._codes(chunk) for chunk in block.chunks]
        codes = np.concatenate(parts) if parts else np.zeros(0, self.codes.dtype)
        limit = np.iinfo(self.codes.dtype).max
        if len(self.categories) > limit:
            raise UnwritableColumnError(
                f"column '{self.name}' has {len(self.categories)} categories, more than its "
                f'{self.codes.dtype} codes can hold; rewrite the table with mode="w"'
            )
        grow(self.codes, codes.astype(self.codes.dtype), start)

    def _codes(self, chunk: pa.Array) -> np.ndarray:
        if not isinstance(chunk, pa.DictionaryArray):
            chunk = chunk.dictionary_encode()  # text appended to a categorical column
        words = chunk.dictionary.cast(pa.string()).to_pylist()
        remap = np.empty(len(words) + 1, dtype=np.int64)
        for i, word in enumerate(words):
            if word is None:  # a null in the dictionary itself (a bare NULL's, encoded): missing, no category
                remap[i] = -1
                continue
            code = self.lookup.get(word)
            if code is None:
                code = self.lookup[word] = len(self.categories)
                self.categories.append(word)
            remap[i] = code
        remap[-1] = -1
        indices = pc.fill_null(chunk.indices.cast(pa.int64()), -1).to_numpy(zero_copy_only=False)
        return remap[indices]  # -1 (NULL) picks the last entry, -1

    def finish(self) -> None:
        if self.inline:
            self.codes.update_attributes({"categories": self.categories})
            return
        grow(self.stored, np.array(self.categories, dtype=object), 0)
