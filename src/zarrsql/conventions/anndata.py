"""AnnData (and MuData) groups as tables: named axes, decoded encodings, sparse entries.

A group with `encoding-type: anndata` (or `MuData` for a MuData root) has the tables:
- `obs` and `var`: the data frames' columns over `(obs,)` / `(var,)`, each frame's index the
  coordinate of its axis (so every table filters and joins by cell or gene name);
- `obs_var`: `X` and `layers/*` — one row per stored entry when all are sparse of one format
  (CSR/CSC), one row per cell otherwise (sparse read densely); CSR and CSC mixed: unnamed;
- `obs_<key>_component` for each `obsm/<key>` array (its second axis a positional dimension),
  `var_<key>_component` for `varm`;
- `obs_obs_2` / `var_var_2` for `obsp` / `varp` (the second axis is named `obs_2`/`var_2`,
  holding the same names, so it still joins to `obs`).
`raw` (the matrix kept before genes were filtered, `adata.raw`) has tables of its own in
group `raw`: `var` (raw/var), `obs_var` (raw/X, its observations the parent's obs index,
since raw keeps obs) and `var_<key>_component` (raw/varm).
`uns`, data frames inside `obsm`/`uns` and awkward arrays give no table; their arrays are
listed by `read_zarr_metadata`. Groups below an AnnData group are analysed here too, so
their arrays carry AnnData's axis names.
"""

from __future__ import annotations

from typing import Any

from zarrsql.conventions.model import GroupInfo, ProblemKind, TableInfo, chunk_grid, resolve_names
from zarrsql.conventions.records import Categorical, EncodedVariable, Nullable, SparseMatrix, Variable
from zarrsql.discovery.roles import Member
from zarrsql.metadata.arrays import ArrayMeta
from zarrsql.metadata.tree import NodeTree

_KINDS = ("anndata", "mudata")
_NULLABLE = ("nullable-integer", "nullable-boolean", "nullable-string-array")


def _kind(tree: NodeTree, path: str) -> str | None:
    group = tree.groups.get(path)
    kind = group.attrs.get("encoding-type") if group else None
    return kind.lower() if isinstance(kind, str) and kind.lower() in _KINDS else None


def _join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


def _array(tree: NodeTree, path: str) -> ArrayMeta | None:
    node = tree.arrays.get(path)
    return node if isinstance(node, ArrayMeta) else None


def _encoding(tree: NodeTree, path: str) -> str | None:
    node = tree.groups.get(path) or _array(tree, path)
    value = node.attrs.get("encoding-type") if node is not None else None
    return value if isinstance(value, str) else None


# ----------------------------------------------------------------------------- frames
class _Misaligned(Exception):
    """A frame column whose rows disagree with its frame's index (anndata refuses the store):
    the frame's table is refused, naming the column, never read without it."""


def _rows(path: str, what: str, shape: tuple[int, ...], n: int) -> None:
    if shape[:1] != (n,):
        raise _Misaligned(
            f"column '/{path}' has {what} of shape {list(shape)} for an index of {n} rows; "
            "its parts disagree (anndata refuses it too): rewrite the column"
        )


def _column(tree: NodeTree, path: str, n: int) -> Variable | None:
    """One data-frame column: a plain array, or a categorical/nullable group; None if not a
    one-value-per-row column this layer reads (a 2-D array, an awkward or unknown encoding:
    it is still listed by read_zarr_metadata). A column that names no node, or whose rows
    are not the index's, raises `_Misaligned`."""
    array = _array(tree, path)
    if array is not None:
        if array.ndim == 1:
            _rows(path, "values", array.shape, n)
        return array if array.ndim == 1 else None
    if path not in tree.groups and path not in tree.arrays:
        raise _Misaligned(f"the frame's column-order names '/{path}', which does not exist; rewrite the frame")
    enc = _encoding(tree, path)
    if enc == "categorical":
        codes, cats = _array(tree, f"{path}/codes"), _array(tree, f"{path}/categories")
        if codes is None or cats is None:
            return None
        _rows(path, "codes", codes.shape, n)
        ordered = bool(tree.groups[path].attrs.get("ordered", False))
        categorical = Categorical(path, codes, cats, ordered)
        return EncodedVariable(path, (n,), codes.chunks, categorical, parts=(codes.path, cats.path))
    if enc in _NULLABLE:
        values, mask = _array(tree, f"{path}/values"), _array(tree, f"{path}/mask")
        if values is None or mask is None:
            return None
        _rows(path, "values", values.shape, n)
        nullable = Nullable(path, values, mask)
        return EncodedVariable(path, (n,), values.chunks, nullable, parts=(values.path, mask.path))
    return None


def _frame(tree: NodeTree, path: str) -> tuple[ArrayMeta | None, list[Variable], str | None]:
    """A data frame group's index array, its readable columns in `column-order`, and the
    problem that refuses its table (a column misaligned with the index), or None."""
    group = tree.groups.get(path)
    if group is None or group.attrs.get("encoding-type") != "dataframe":
        return None, [], None
    index = _array(tree, _join(path, str(group.attrs.get("_index", "_index"))))
    if index is None or index.ndim != 1:
        return None, [], None
    order = group.attrs.get("column-order") or []
    columns = []
    for name in order:
        if isinstance(name, str):
            try:
                columns.append(_column(tree, _join(path, name), index.shape[0]))
            except _Misaligned as err:
                return index, [], str(err)
    return index, [c for c in columns if c is not None], None


# ----------------------------------------------------------------------------- matrices
def _matrix(tree: NodeTree, path: str, shape: tuple[int, int]) -> ArrayMeta | SparseMatrix | None:
    array = _array(tree, path)
    if array is not None:
        return array if array.shape == shape else None
    enc = _encoding(tree, path)
    if enc not in ("csr_matrix", "csc_matrix"):
        return None
    parts = [_array(tree, f"{path}/{p}") for p in ("data", "indices", "indptr")]
    declared = tuple(tree.groups[path].attrs.get("shape") or ())
    if any(p is None for p in parts) or declared != shape:
        return None
    return SparseMatrix(path, enc[:3], shape, *parts)  # type: ignore[arg-type]


def _sparse_variable(m: SparseMatrix) -> EncodedVariable:
    chunks = (m.shape[0], max(1, min(m.shape[1], 1024))) if m.axis == 0 else (max(1, min(m.shape[0], 1024)), m.shape[1])
    return EncodedVariable(m.path, m.shape, chunks, m, parts=(m.data.path, m.indices.path, m.indptr.path))


def _matrix_table(
    group: str, dims: tuple[str, str], shape: tuple[int, int], coords: tuple, mats: list, name: str | None = None
) -> TableInfo | None:
    if not mats:
        return None
    sparse = [m for m in mats if isinstance(m, SparseMatrix)]
    variables = [_sparse_variable(m) if isinstance(m, SparseMatrix) else m for m in mats]
    layout, problem, kind = "dense", None, None
    if len(sparse) == len(mats):
        formats = {m.format for m in sparse}
        layout = formats.pop() if len(formats) == 1 else "dense"
        if len(sparse) > 1 and {m.format for m in sparse} == {"csr", "csc"}:
            problem = (
                f"it mixes CSR and CSC sparse matrices; read them one at a time with array_path := '{sparse[0].path}'"
            )
            kind = ProblemKind.CONVENTION
    grid = chunk_grid(variables, 2)
    return TableInfo(
        group,
        None,
        dims,
        shape,
        grid,
        tuple(variables),
        coords,
        problem,
        layout=layout,
        name_hint=name,
        problem_kind=kind,
    )


def _named(mats: dict[str, Any]) -> list:
    return [m for m in mats.values() if m is not None]


def _frame_table(path: str, axis: str, index: ArrayMeta, cols: list[Variable], problem: str | None) -> TableInfo:
    grid = chunk_grid([index, *cols], 1)
    kind = ProblemKind.CONVENTION if problem else None
    return TableInfo(path, None, (axis,), index.shape, grid, tuple(cols), (index,), problem, problem_kind=kind)


def _raw_tables(tree: NodeTree, root: str, path: str) -> list[TableInfo]:
    """The tables of `raw` (the matrix before variables were filtered): `var` from raw/var,
    `obs_var` from raw/X over the parent's observations (raw keeps obs), and raw/varm."""
    obs_index, _, _ = _frame(tree, _join(root, "obs"))
    var_index, var_cols, problem = _frame(tree, _join(path, "var"))
    if var_index is None:
        return []
    tables = [
        _frame_table(path, "var", var_index, var_cols, problem),
        *_embeddings(tree, path, "varm", "var", var_index),
    ]
    if obs_index is not None:
        shape = (obs_index.shape[0], var_index.shape[0])
        x = _matrix(tree, _join(path, "X"), shape)
        t = _matrix_table(path, ("obs", "var"), shape, (obs_index, var_index), [x] if x is not None else [])
        tables[1:1] = [t] if t else []
    return tables


def _is_raw(tree: NodeTree, root: str, path: str) -> bool:
    """Whether `path` is the `raw` element of the AnnData group `root`."""
    group = tree.groups.get(path)
    kind = group.attrs.get("encoding-type") if group is not None else None
    return path == _join(root, "raw") and kind in ("raw", None)


def _tables(tree: NodeTree, path: str) -> list[TableInfo]:
    obs_index, obs_cols, obs_problem = _frame(tree, _join(path, "obs"))
    var_index, var_cols, var_problem = _frame(tree, _join(path, "var"))
    tables: list[TableInfo] = []
    for axis, index, cols, problem in (
        ("obs", obs_index, obs_cols, obs_problem),
        ("var", var_index, var_cols, var_problem),
    ):
        if index is not None:
            tables.append(_frame_table(path, axis, index, cols, problem))
    if obs_index is None or var_index is None:
        return tables
    n_obs, n_var = obs_index.shape[0], var_index.shape[0]
    mats = {"X": _matrix(tree, _join(path, "X"), (n_obs, n_var))}
    for layer in tree.children(_join(path, "layers"))[0] + tree.children(_join(path, "layers"))[1]:
        mats[layer] = _matrix(tree, layer, (n_obs, n_var))  # by path: a layer may be named X
    t = _matrix_table(path, ("obs", "var"), (n_obs, n_var), (obs_index, var_index), _named(mats))
    tables += [t] if t else []
    tables += _embeddings(tree, path, "obsm", "obs", obs_index) + _embeddings(tree, path, "varm", "var", var_index)
    for element, axis, index in (("obsp", "obs", obs_index), ("varp", "var", var_index)):
        n = index.shape[0]
        members = tree.children(_join(path, element))
        pair = [_matrix(tree, p, (n, n)) for p in members[0] + members[1]]
        t = _matrix_table(path, (axis, f"{axis}_2"), (n, n), (index, index), [m for m in pair if m is not None])
        tables += [t] if t else []
    return tables


def _embeddings(tree: NodeTree, path: str, element: str, axis: str, index: ArrayMeta) -> list[TableInfo]:
    out = []
    for p in tree.children(_join(path, element))[1]:
        a = _array(tree, p)
        if a is None or a.ndim != 2 or a.shape[0] != index.shape[0]:
            continue
        key = a.name
        dims = (axis, f"{key}_component")
        out.append(TableInfo(path, None, dims, a.shape, chunk_grid([a], 2), (a,), (index, None)))
    return out


# ----------------------------------------------------------------------------- members
def _axis_dims(tree: NodeTree, root: str, array: ArrayMeta) -> tuple[str, ...] | None:
    """AnnData's axis names for an array below the AnnData group `root`."""
    rel = array.path[len(root) + 1 :] if root else array.path
    parts = rel.split("/")
    if parts[0] == "raw" and len(parts) > 1 and parts[1] in ("X", "var", "varm"):
        parts = parts[1:]  # raw holds X, var and varm over the same axes as the main ones
    head = parts[0]
    if head in ("obs", "var") and array.ndim == 1 and parts[-1] != "categories":
        return (head,)
    if head in ("X", "layers") and array.ndim == 2:
        return ("obs", "var")
    if head in ("obsm", "varm") and len(parts) == 2:
        axis = head[:3]
        return (axis,) if array.ndim == 1 else (axis, f"{parts[1]}_component") if array.ndim == 2 else None
    if head in ("obsp", "varp") and len(parts) == 2 and array.ndim == 2:
        return (head[:3], f"{head[:3]}_2")
    return None


def _members(tree: NodeTree, path: str, root: str) -> tuple[Member, ...]:
    out = []
    for p in tree.children(path)[1]:
        node = tree.arrays[p]
        if not isinstance(node, ArrayMeta):
            out.append(Member(node, "unsupported", None))
            continue
        dims = _axis_dims(tree, root, node)
        index_of = {
            _join(root, f, str((tree.groups.get(_join(root, f)) or _NoAttrs).attrs.get("_index", "_index")))
            for f in ("obs", "var", "raw/var")
        }
        role = (
            "unsupported"
            if not node.dtype.supported
            else "coord"
            if p in index_of
            else "scalar"
            if node.ndim == 0
            else "data"
        )
        out.append(Member(node, role, dims))
    return tuple(out)


class _NoAttrs:
    attrs: dict = {}


def _anndata_root(tree: NodeTree, path: str) -> str | None:
    """The nearest AnnData/MuData group at or above `path`."""
    p = path
    while True:
        if _kind(tree, p):
            return p
        if not p:
            return None
        p = p.rpartition("/")[0]


def analyze(tree: NodeTree, path: str) -> GroupInfo | None:
    """The AnnData reading of the group at `path`, or None when it is not in an AnnData group.

    A MuData root's own modalities (`mod/<name>`) are AnnData groups of their own.
    """
    root = _anndata_root(tree, path)
    if root is None:
        return None
    if root != path and _kind(tree, path) is None and _inside_modality(tree, root, path):
        return None  # below a MuData root but inside mod/<name>, which is its own AnnData group
    if root == path:
        tables = resolve_names(_tables(tree, path))
    else:
        tables = resolve_names(_raw_tables(tree, root, path)) if _is_raw(tree, root, path) else []
    return GroupInfo(path, _members(tree, path, root), tuple(tables), None)


def _inside_modality(tree: NodeTree, root: str, path: str) -> bool:
    rel = path[len(root) + 1 :] if root else path
    return rel == "mod" or rel.startswith("mod/")
