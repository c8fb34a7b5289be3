"""Test support for sbemu's users and its own suites.

``process`` (``SbemuProcess``: the one way to start an sbemu process for tests, benches and
tools; exported here), ``pytest_plugin`` (the ``sbemu_server`` / ``sbemu_entities`` fixtures,
loaded through the ``pytest11`` entry point) and ``container`` (``SbemuContainer``, sbemu's
image in testcontainers-python; needs the ``sbemu[testcontainers]`` extra, so it is not
imported here).
"""

from .process import Ready, SbemuProcess, StartError

__all__ = ["Ready", "SbemuProcess", "StartError"]
