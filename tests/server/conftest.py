"""The Flight SQL server's fixtures: the stores (once per session), one read-only server per
module on a free port of 127.0.0.1, the in-process connection to compare with, a client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import zarrsql
from tests.server.helpers import Stores, adbc_connect, mounted, write_stores


@pytest.fixture(scope="session")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Stores:
    return write_stores(tmp_path_factory.mktemp("flight"))


@pytest.fixture(scope="module")
def server(stores: Stores) -> Iterator[Any]:
    """A read-only server with a generated token, on a free port of 127.0.0.1."""
    from zarrsql.server import serve

    con = mounted(stores)
    handle = serve(con, "127.0.0.1", 0)
    yield handle
    handle.shutdown()
    con.close()


@pytest.fixture(scope="module")
def local(stores: Stores) -> Iterator[zarrsql.Connection]:
    """The in-process connection the server's answers are compared with."""
    con = mounted(stores)
    yield con
    con.close()


@pytest.fixture
def client(server: Any) -> Iterator[Any]:
    con = adbc_connect(server)
    yield con
    con.close()
