"""Start-up hook of the Python processes a local Spark session starts: import pyspark from
the installed package, not from its zip.

Spark starts every Python process it needs (the data source lookup and planners, the
streaming source runner, the task workers' daemons) with ``$SPARK_HOME/python/lib/pyspark.zip``
first on PYTHONPATH. Python caches no bytecode for modules imported from a zip, so each of
those processes compiled pyspark from source: about 1 CPU-second each instead of 0.26 from
the installed package's ``__pycache__``, and a report run starts about eight of them.

With a pip-installed pyspark, SPARK_HOME *is* the package directory, so the zip holds the same
code as the package the interpreter finds anyway. Then (and only then) this hook removes the
zip from ``sys.path``; any other layout (pyspark only in the zip, another installation) keeps
the path as it is. ``sparkjobs.session.build_session`` puts this directory on the PYTHONPATH
that a local session's JVM hands to its Python processes. Another ``sitecustomize`` further
down the path still runs (this one shadows it).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys


def drop_redundant_pyspark_zip(path: list[str]) -> list[str]:
    """`path` without ``<pkg>/python/lib/pyspark.zip`` when the pyspark found without it is
    the package directory ``<pkg>`` that zip came with; otherwise `path` unchanged."""
    zips = [p for p in path if os.path.basename(p) == "pyspark.zip"]
    if not zips:
        return path
    rest = [p for p in path if p not in zips]
    spec = importlib.machinery.PathFinder.find_spec("pyspark", rest)
    if spec is None or not spec.origin:
        return path
    package_dir = os.path.dirname(os.path.realpath(spec.origin))
    own = os.path.join(package_dir, "python", "lib", "pyspark.zip")
    if all(os.path.realpath(z) == own for z in zips):
        return rest
    return path


def _chain() -> None:
    """Run the sitecustomize this one shadows, if any."""
    here = os.path.dirname(os.path.realpath(__file__))
    others = [p for p in sys.path if os.path.realpath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


if "pyspark" not in sys.modules:
    sys.path[:] = drop_redundant_pyspark_zip(sys.path)
_chain()
