"""What a local session does to start faster: pyspark imported from the installed package in
Spark's Python processes (not from pyspark.zip), and the driver JVM's class archive."""

from __future__ import annotations

import importlib.util
import os
import zipfile
from pathlib import Path

import pytest
import sparkjobs

HOOK = Path(sparkjobs.__file__).resolve().parent / "pythonpath" / "sitecustomize.py"


def _hook_module():
    spec = importlib.util.spec_from_file_location("sbemu_test_sitecustomize", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_pyspark(root: Path) -> tuple[str, str]:
    """site-packages-like dir with a pyspark package and its python/lib/pyspark.zip."""
    pkg = root / "site" / "pyspark"
    (pkg / "python" / "lib").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    with zipfile.ZipFile(pkg / "python" / "lib" / "pyspark.zip", "w") as z:
        z.writestr("pyspark/__init__.py", "")
    return str(root / "site"), str(pkg / "python" / "lib" / "pyspark.zip")


def test_the_zip_of_the_installed_package_is_dropped(tmp_path):
    hook = _hook_module()
    site, own_zip = _fake_pyspark(tmp_path)
    assert hook.drop_redundant_pyspark_zip([own_zip, "/x/py4j.zip", site]) == ["/x/py4j.zip", site]


def test_any_other_zip_stays(tmp_path):
    hook = _hook_module()
    site, _own = _fake_pyspark(tmp_path / "a")
    other = tmp_path / "b" / "spark" / "python" / "lib"
    other.mkdir(parents=True)
    other_zip = str(other / "pyspark.zip")
    with zipfile.ZipFile(other_zip, "w") as z:
        z.writestr("pyspark/__init__.py", "")
    # a zip from another Spark installation, or no pyspark outside the zip: path unchanged
    assert hook.drop_redundant_pyspark_zip([other_zip, site]) == [other_zip, site]
    assert hook.drop_redundant_pyspark_zip([other_zip]) == [other_zip]


def test_local_workers_import_pyspark_from_the_package(spark):
    import pyspark

    package = os.path.dirname(os.path.realpath(pyspark.__file__))
    seen = set(
        spark.sparkContext.parallelize(range(2), 2)
        .map(lambda _: __import__("pyspark").__file__)
        .collect()
    )
    assert seen and all(".zip" not in f for f in seen), seen
    assert {os.path.dirname(os.path.realpath(f)) for f in seen} == {package}


def test_class_archive_options(monkeypatch, tmp_path):
    from sparkjobs import session

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = session.cds_archive_path()
    if path is None:
        pytest.skip("no java")
    assert path.parent == tmp_path / "sbemu"
    assert session.cds_java_options() == []  # not built: nothing
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not an archive")  # the JVM skips an unusable archive silently
    assert f"-XX:SharedArchiveFile={path}" in session.cds_java_options()
    assert "-Xlog:cds=off" in session.driver_java_options("local[2]")
    assert not any("SharedArchive" in o for o in session.driver_java_options("spark://h:7077"))
    monkeypatch.setenv("SBEMU_SPARK_CDS", "0")
    assert session.cds_archive_path() is None and session.cds_java_options() == []
