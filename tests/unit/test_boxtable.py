"""The command line's text table: where the gap goes, the footer, alignment and clipping.

Expected texts follow from the definitions in `zarrsql.boxtable` (head rows, three dot rows,
tail rows; `N rows (M shown)`), not from a run of the renderer.
"""

from __future__ import annotations

from zarrsql.boxtable import MAX_CELL, Shown, footer, render, type_label


def _body(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("├")) + 1
    end = next(i for i, line in enumerate(lines) if line.startswith("└"))
    return lines[start:end]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip("│").split("│")]


def test_footer_counts() -> None:
    assert footer(1, 1) == "1 row"
    assert footer(0, 0) == "0 rows"
    assert footer(12, 12) == "12 rows"
    assert footer(2008800, 40) == "2008800 rows (40 shown)"


def test_gap_sits_between_the_first_and_last_rows() -> None:
    rows = [(str(i), f"v{i}") for i in (0, 1, 2, 97, 98)]
    text = render(Shown(["i", "name"], ["BIGINT", "VARCHAR"], rows, total=99, gap=3))
    body = _body(text)
    assert [_cells(b) for b in body] == [
        ["0", "v0"],
        ["1", "v1"],
        ["2", "v2"],
        ["·", "·"],
        ["·", "·"],
        ["·", "·"],
        ["97", "v97"],
        ["98", "v98"],
    ]
    assert text.splitlines()[-1].strip() == "99 rows (5 shown)"


def test_a_gap_after_every_kept_row_still_shows() -> None:
    text = render(Shown(["i"], ["INTEGER"], [("0",)], total=10, gap=1))
    assert [_cells(b) for b in _body(text)] == [["0"], ["·"], ["·"], ["·"]]


def test_numbers_right_text_left_null_named() -> None:
    text = render(Shown(["n", "s"], ["DOUBLE", "VARCHAR"], [("1.5", "a"), ("10.25", None)], total=2))
    body = _body(text)
    # widths are those of the type labels: "double" (6) and "varchar" (7)
    assert body[0] == "│    1.5 │ a       │"
    assert body[1] == "│  10.25 │ NULL    │"
    assert "double" in text.splitlines()[2]
    assert text.splitlines()[-1].strip() == "2 rows"


def test_long_values_are_clipped() -> None:
    text = render(Shown(["s"], ["VARCHAR"], [("x" * (MAX_CELL + 10),)], total=1))
    cell = _cells(_body(text)[0])[0]
    assert len(cell) == MAX_CELL
    assert cell.endswith("…")


def test_type_labels_follow_duckdb_short_names() -> None:
    assert type_label("BIGINT") == "int64"
    assert type_label("UBIGINT[]") == "uint64[]"
    assert type_label("STRUCT(a INTEGER, b VARCHAR)") == "struct(a int32, b varchar)"
    assert type_label("TIMESTAMP") == "timestamp"
