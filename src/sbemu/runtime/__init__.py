"""The running process: wiring (server.py: listeners, partition brokers, admin HTTP, timers),
the commit loop that turns the brokers' staged writes into group commits (commitloop.py), the
extra listening ports (endpoints.py: AMQPS, WebSockets, the admin port's upgrade route) and the
allocator's heap trimming (heap.py). The command line (sbemu.cli) starts it."""
