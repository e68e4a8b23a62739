"""One `local[2]` SparkSession for the whole test run, with the zarr source registered.

Spark's Python workers must run this virtualenv's interpreter with this checkout's `src` on
their path, so both are set before the session starts; a JDK is found through JAVA_HOME
(`.ci/run` installs one when `java` is missing).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")
_JDK = Path("/usr/lib/jvm/java-17-openjdk-amd64")


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    import zarrsql.spark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if "JAVA_HOME" not in os.environ and _JDK.is_dir():
        os.environ["JAVA_HOME"] = str(_JDK)
    paths = [SRC, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    session = (
        SparkSession.builder.master("local[2]")
        .appName("zarrsql-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
        .config("spark.sql.session.timeZone", "UTC")
        # CREATE TABLE makes a directory here: not in the working tree
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("spark-warehouse")))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    zarrsql.spark.register(session)
    yield session
    session.stop()
