"""Shared pytest fixtures: the generated Zarr stores.

The stores are produced by ``scripts/generate_fixtures.py`` and cached under
``tests/fixtures`` (see that script for the cache rule).  ``scripts/`` is not a
package, so the generator is imported by file path.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
GENERATOR_PATH = REPO_ROOT / "scripts" / "generate_fixtures.py"
_MODULE_NAME = "zarrsql_fixture_generator"

# make `import oracles` work from every test directory
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))


def load_generator() -> ModuleType:
    """Import scripts/generate_fixtures.py once (cached in sys.modules)."""
    module = sys.modules.get(_MODULE_NAME)
    if module is None:
        spec = importlib.util.spec_from_file_location(_MODULE_NAME, GENERATOR_PATH)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[_MODULE_NAME] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(_MODULE_NAME, None)
            raise
    return module


@pytest.fixture(scope="session")
def fixture_generator() -> ModuleType:
    """The generator module (``ensure_fixtures``, ``ALL_STORES``, ...)."""
    return load_generator()


@pytest.fixture(scope="session")
def fixtures_dir(fixture_generator: ModuleType) -> Path:
    """Root of the generated fixture stores (generated on first use, cached)."""
    return fixture_generator.ensure_fixtures()


@pytest.fixture(scope="session")
def fixture_path(fixtures_dir: Path) -> Callable[[str], str]:
    """Factory: ``fixture_path("v2/air_temperature.zarr") -> "/abs/path"``.

    Fails loudly for a name that the generator did not produce, so a typo in a
    test does not turn into a confusing "store not found" from zarrsql.
    """

    def _path(name: str) -> str:
        path = fixtures_dir / name
        if not path.exists():
            raise FileNotFoundError(f"no fixture {name!r} under {fixtures_dir}")
        return str(path)

    return _path
