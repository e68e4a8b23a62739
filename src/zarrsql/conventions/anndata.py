"""AnnData (and MuData) groups as tables: named axes, decoded encodings, sparse entries.

A group with `encoding-type: anndata` (or `MuData` for a MuData root) has the tables:
- `obs` and `var`: the data frames' columns over `(obs,)` / `(var,)`, each frame's index the
  coordinate of its axis (so every table filters and joins by cell or gene name);
- `obs_var`: `X` and `layers/*` — one row per stored entry when all are sparse of one format
  (CSR/CSC), one row per cell otherwise (sparse read densely); CSR and CSC mixed: unnamed;
- `obs_<key>_component` for each `obsm/<key>` entry (its second axis a positional dimension
  `<key>_component`), `var_<key>_component` for `varm`: a dense array (one of more than two
  dimensions adds the axes `<key>_component_2`, ...) or a CSR/CSC matrix (one row per stored
  entry, as `obs_var` when sparse);
- `obs_obs_2` / `var_var_2` for `obsp` / `varp` (the second axis is named `obs_2`/`var_2`,
  holding the same names, so it still joins to `obs`).
`raw` (the matrix kept before genes were filtered, `adata.raw`) has tables of its own in
group `raw`: `var` (raw/var), `obs_var` (raw/X, its observations the parent's obs index,
since raw keeps obs) and `var_<key>_component` (raw/varm).
An element whose parts disagree (a frame column of another length than its index, a matrix
of another shape than obs and var give) is never left out: its table is listed without a
name and reading it raises a DecodeError naming the element (anndata refuses the store).
`uns`, data frames inside `obsm`/`uns` and awkward arrays give no table; their arrays are
listed by `read_zarr_metadata`. Groups below an AnnData group are analysed here too, so
their arrays carry AnnData's axis names.
"""

from __future__ import annotations

from zarrsql.conventions.h5col import name_list
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
    """An element whose parts disagree (anndata refuses the store): a frame column whose rows
    are not its frame's index's, a matrix whose shape is not the one obs and var give. Its
    table is refused (a DecodeError on reading), naming the element, never read without it."""


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
    problem that refuses its table (a column misaligned with the index, a `column-order` that
    lists no names), or None. `column-order` is read by `h5col.name_list`: from an HDF5 file
    a frame of one column lists it as a plain string (kerchunk's flattening)."""
    group = tree.groups.get(path)
    if group is None or group.attrs.get("encoding-type") != "dataframe":
        return None, [], None
    index = _array(tree, _join(path, str(group.attrs.get("_index", "_index"))))
    if index is None or index.ndim != 1:
        return None, [], None
    order = group.attrs.get("column-order", [])
    names = name_list(order)
    if names is None:
        return index, [], f"the frame's column-order is {order!r}, not a list of column names; rewrite the frame"
    columns = []
    for name in names:
        try:
            columns.append(_column(tree, _join(path, name), index.shape[0]))
        except _Misaligned as err:
            return index, [], str(err)
    return index, [c for c in columns if c is not None], None


# ----------------------------------------------------------------------------- matrices
def _fits(path: str, found: object, shape: tuple[int, int], axes: str) -> None:
    """Raise `_Misaligned` unless a matrix's shape (an array's, or a sparse group's `shape`
    attribute) is the `shape` its axes give: read over them, its rows would be misnamed."""
    if not isinstance(found, list | tuple) or tuple(found) != shape:
        shown = list(found) if isinstance(found, list | tuple) else repr(found)
        raise _Misaligned(
            f"matrix '/{path}' has shape {shown}, not the {list(shape)} {axes}; its shape and its axes "
            "disagree (anndata refuses the store too): rewrite the matrix"
        )


def _matrix(tree: NodeTree, path: str, shape: tuple[int, int], axes: str) -> ArrayMeta | SparseMatrix | None:
    """The matrix at `path` over axes of `shape` (X, a layer, raw/X, an obsp/varp entry), or
    None when `path` holds no matrix this layer reads (an unknown encoding: its arrays are
    still listed by read_zarr_metadata). A matrix of another shape, or a sparse one missing
    one of its three arrays, raises `_Misaligned` (anndata refuses such a store), so its table
    is refused, never read without it; `axes` says where `shape` comes from, for the error
    ("(n_obs, n_var) that obs and var give")."""
    array = _array(tree, path)
    if array is not None:
        _fits(path, array.shape, shape, axes)
        return array
    enc = _encoding(tree, path)
    if enc not in ("csr_matrix", "csc_matrix"):
        return None
    parts = {p: _array(tree, f"{path}/{p}") for p in ("data", "indices", "indptr")}
    absent = [p for p, a in parts.items() if a is None and f"{path}/{p}" not in tree.arrays]
    if absent:
        raise _Misaligned(f"sparse matrix '/{path}' has no '{absent[0]}' array; rewrite the matrix")
    data, indices, indptr = parts["data"], parts["indices"], parts["indptr"]
    if data is None or indices is None or indptr is None:
        return None  # a part of unreadable metadata: refused where the read checks its nodes
    _fits(path, tree.groups[path].attrs.get("shape"), shape, axes)
    return SparseMatrix(path, enc[:3], shape, data, indices, indptr)


def _matrices(tree: NodeTree, paths: list[str], shape: tuple[int, int], axes: str) -> tuple[list, str | None]:
    """The readable matrices among `paths`, and the problem of the first that disagrees with
    its axes (which refuses their table, pointing to the others), or None."""
    found, problem = [], None
    for path in paths:
        try:
            m = _matrix(tree, path, shape, axes)
        except _Misaligned as err:
            problem = problem or str(err)
            continue
        if m is not None:
            found.append(m)
    if problem and found:
        problem += f"; the table's other matrices read alone with array_path := '{found[0].path}'"
    return found, problem


def _sparse_variable(m: SparseMatrix) -> EncodedVariable:
    chunks = (m.shape[0], max(1, min(m.shape[1], 1024))) if m.axis == 0 else (max(1, min(m.shape[0], 1024)), m.shape[1])
    return EncodedVariable(m.path, m.shape, chunks, m, parts=(m.data.path, m.indices.path, m.indptr.path))


def _matrix_table(
    group: str, dims: tuple[str, str], shape: tuple[int, int], coords: tuple, mats: list, corrupt: str | None
) -> TableInfo | None:
    """The table of matrices over `dims`; refused (listed without a name) when one of them is
    `corrupt` (the problem naming it) or when they mix CSR and CSC."""
    if not mats and not corrupt:
        return None
    sparse = [m for m in mats if isinstance(m, SparseMatrix)]
    variables = [_sparse_variable(m) if isinstance(m, SparseMatrix) else m for m in mats]
    layout, problem, kind = "dense", corrupt, ProblemKind.CORRUPT if corrupt else None
    if mats and len(sparse) == len(mats):
        formats = {m.format for m in sparse}
        layout = formats.pop() if len(formats) == 1 else "dense"
        if len(sparse) > 1 and {m.format for m in sparse} == {"csr", "csc"} and not corrupt:
            problem = (
                f"it mixes CSR and CSC sparse matrices; read them one at a time with array_path := '{sparse[0].path}'"
            )
            kind = ProblemKind.CONVENTION
    grid = chunk_grid(variables, 2) if variables else (1, 1)
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
        problem_kind=kind,
    )


def _frame_table(path: str, axis: str, index: ArrayMeta, cols: list[Variable], problem: str | None) -> TableInfo:
    grid = chunk_grid([index, *cols], 1)
    kind = ProblemKind.CORRUPT if problem else None
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
        x, problem = _matrices(tree, [_join(path, "X")], shape, "(n_obs, n_var) that obs and raw/var give")
        t = _matrix_table(path, ("obs", "var"), shape, (obs_index, var_index), x, problem)
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
    layers = tree.children(_join(path, "layers"))  # by path: a layer may be named X
    paths = [_join(path, "X"), *layers[0], *layers[1]]
    mats, problem = _matrices(tree, paths, (n_obs, n_var), "(n_obs, n_var) that obs and var give")
    t = _matrix_table(path, ("obs", "var"), (n_obs, n_var), (obs_index, var_index), mats, problem)
    tables += [t] if t else []
    tables += _embeddings(tree, path, "obsm", "obs", obs_index) + _embeddings(tree, path, "varm", "var", var_index)
    for element, axis, index in (("obsp", "obs", obs_index), ("varp", "var", var_index)):
        n = index.shape[0]
        members = tree.children(_join(path, element))
        pair, problem = _matrices(tree, members[0] + members[1], (n, n), f"(n_{axis}, n_{axis}) that {axis} gives")
        t = _matrix_table(path, (axis, f"{axis}_2"), (n, n), (index, index), pair, problem)
        tables += [t] if t else []
    return tables


def _embeddings(tree: NodeTree, path: str, element: str, axis: str, index: ArrayMeta) -> list[TableInfo]:
    """A table per `obsm`/`varm` entry, in key order: a dense array of two or more dimensions,
    or a CSR/CSC matrix (one row per stored entry, as X is when sparse). One whose rows are
    not its axis's is refused, naming it (anndata refuses the store), never left out without
    a word."""
    groups, arrays = tree.children(_join(path, element))
    out = []
    for p in sorted([*groups, *arrays]):
        a = _array(tree, p)
        if a is not None:
            t = _dense_embedding(path, p, a, axis, index)
        else:
            t = _sparse_embedding(tree, path, p, axis, index) if p in tree.groups else None
        out += [t] if t else []
    return out


def _sparse_embedding(tree: NodeTree, path: str, p: str, axis: str, index: ArrayMeta) -> TableInfo | None:
    """The table of a sparse obsm/varm group, over the same axes as its dense twin; None when
    the group is no CSR/CSC matrix (a data frame, an awkward array: listed by read_zarr_metadata).
    Its width k is the one its `shape` attribute declares; its rows must be the axis's."""
    n, declared = index.shape[0], tree.groups[p].attrs.get("shape")
    k = declared[1] if isinstance(declared, list | tuple) and len(declared) == 2 and isinstance(declared[1], int) else 0
    mats, problem = _matrices(tree, [p], (n, k), f"(n_{axis}, k) that {axis} gives")
    dims = (axis, f"{p.rsplit('/', 1)[-1]}_component")
    return _matrix_table(path, dims, (n, k), (index, None), mats, problem)


def _component_dims(axis: str, key: str, ndim: int) -> tuple[str, ...]:
    """An obsm/varm entry's axes: its observation (variable) axis, then `<key>_component` and,
    for an array of more than two dimensions, `<key>_component_2`, ... (positions 0 … k-1)."""
    return (axis, f"{key}_component", *(f"{key}_component_{i}" for i in range(2, ndim)))


def _dense_embedding(path: str, p: str, a: ArrayMeta, axis: str, index: ArrayMeta) -> TableInfo | None:
    """The table of a dense obsm/varm array; None for a 0-D or 1-D one (anndata stores a 1-D
    entry as (n, 1)). Anndata accepts (n_obs, k, l, ...) too: such an array is one row per
    cell over axes `<key>_component`, `<key>_component_2`, ..., and keeps the name
    `<axis>_<key>_component` (its axes joined would repeat the key), so every entry is found
    under the same name pattern whatever its number of dimensions."""
    if a.ndim < 2:
        return None
    dims, grid = _component_dims(axis, a.name, a.ndim), chunk_grid([a], a.ndim)
    name = f"{axis}_{a.name}_component"
    if a.shape[0] == index.shape[0]:
        return TableInfo(path, None, dims, a.shape, grid, (a,), (index, *(None,) * (a.ndim - 1)), name_hint=name)
    problem = (
        f"array '/{p}' has shape {list(a.shape)} but {axis} has {index.shape[0]} rows; its rows and its "
        "axis disagree (anndata refuses the store too): rewrite the array"
    )
    coords = (None,) * a.ndim
    return TableInfo(
        path, None, dims, a.shape, grid, (a,), coords, problem, name_hint=name, problem_kind=ProblemKind.CORRUPT
    )


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
    if head in ("obsm", "varm") and len(parts) == 2 and array.ndim >= 1:
        return _component_dims(head[:3], parts[1], array.ndim)[: array.ndim]
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
