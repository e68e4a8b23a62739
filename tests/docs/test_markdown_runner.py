"""The Markdown example runner itself: it must catch a doc that disagrees with the code."""

from __future__ import annotations

from pathlib import Path

import pytest

import zarrsql
from tests.docs.markdown import ExampleFailure, blocks, matches, outputs_checked, run_block

DOC = """# A doc

```python
x = 6 * 7
print(x)
```

```text
42
```

```sql no-run
SELECT * FROM nowhere;
```

```sh
rm -rf /
```

- a list item with an example:

  ```python
  print(x + 1)
  ```

```sql
SELECT * FROM read_zarr('missing.zarr');
```

```text
StoreNotFoundError: no Zarr store at 'missing.zarr'[...]
```
"""


@pytest.fixture
def doc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "doc.md"
    path.write_text(DOC, encoding="utf-8")
    return path


def test_blocks_are_found_with_their_outputs(doc: Path) -> None:
    found = blocks(doc)
    assert [b.info for b in found] == ["python", "text", "sql no-run", "sh", "python", "sql", "text"]
    assert [b.runnable for b in found] == [True, False, False, False, True, True, False]
    assert found[0].output == "42"
    assert found[4].code == "print(x + 1)"  # the list item's indent is gone
    assert found[4].output is None
    assert str(found[5].output).startswith("StoreNotFoundError:")


def test_a_doc_that_agrees_runs_clean(doc: Path) -> None:
    with zarrsql.connect() as con:
        namespace = {"con": con}
        for block in blocks(doc):
            if block.runnable:
                run_block(block, namespace)
    assert namespace["x"] == 42


def _first_runnable(text: str, tmp_path: Path):  # noqa: ANN202
    path = tmp_path / "bad.md"
    path.write_text(text, encoding="utf-8")
    return next(b for b in blocks(path) if b.runnable)


@pytest.mark.skipif(not outputs_checked(), reason="outputs are compared on DuckDB 2.x only")
def test_a_wrong_output_fails(tmp_path: Path) -> None:
    block = _first_runnable("```python\nprint(6 * 7)\n```\n```text\n41\n```\n", tmp_path)
    with pytest.raises(ExampleFailure, match="the doc shows"):
        run_block(block, {})


@pytest.mark.skipif(not outputs_checked(), reason="outputs are compared on DuckDB 2.x only")
def test_a_wrong_sql_rendering_fails(tmp_path: Path) -> None:
    block = _first_runnable("```sql\nSELECT 1 AS one\n```\n```text\nnot a table\n```\n", tmp_path)
    with zarrsql.connect() as con, pytest.raises(ExampleFailure, match="the doc shows"):
        run_block(block, {"con": con})


def test_an_example_that_raises_fails(tmp_path: Path) -> None:
    block = _first_runnable("```python\n1 / 0\n```\n", tmp_path)
    with pytest.raises(ExampleFailure, match="raised ZeroDivisionError"):
        run_block(block, {})


def test_an_error_of_another_class_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    text = "```sql\nSELECT * FROM read_zarr('missing.zarr')\n```\n\n```text\nSelectionError: [...]\n```\n"
    block = _first_runnable(text, tmp_path)
    with zarrsql.connect() as con, pytest.raises(ExampleFailure, match="the example raised StoreNotFoundError"):
        run_block(block, {"con": con})


def test_an_error_the_code_no_longer_raises_fails(tmp_path: Path) -> None:
    block = _first_runnable("```python\nx = 1\n```\n```text\nValueError: bad\n```\n", tmp_path)
    with pytest.raises(ExampleFailure, match="raised nothing"):
        run_block(block, {})


def test_an_error_with_another_message_fails(tmp_path: Path) -> None:
    text = "```python\nraise ValueError('bad one')\n```\n```text\nValueError: bad two\n```\n"
    block = _first_runnable(text, tmp_path)
    with pytest.raises(ExampleFailure, match="the doc shows the message"):
        run_block(block, {})


def test_the_wildcard_stands_for_any_text() -> None:
    assert matches("a [...] c", "a b b b c")
    assert matches("┌──┐\n[...]\n└──┘", "┌──┐\n│ 1 │\n│ 2 │\n└──┘")
    assert not matches("a [...] c", "a b d")
    assert matches("x  \n", "x")  # trailing blanks do not count


def test_a_warning_of_the_example_fails(tmp_path: Path) -> None:
    block = _first_runnable("```python\nimport warnings\nwarnings.warn('careful')\n```\n", tmp_path)
    with pytest.raises(ExampleFailure, match="raised UserWarning: careful"):
        run_block(block, {"__name__": "__doc_example__"})
