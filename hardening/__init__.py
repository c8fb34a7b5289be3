"""sbemu's hardening suite: protocol fuzzing, crash consistency, load/abuse and soak runs.

Everything here drives a real ``python -m sbemu serve`` subprocess over loopback sockets;
the bounded parts run inside ``make test`` (tests/fuzz, tests/crash, tests/load), the long
runs through ``make fuzz``, ``make crash-test`` and ``make soak``.
"""
