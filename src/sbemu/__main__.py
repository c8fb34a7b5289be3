"""``python -m sbemu serve ...``: the same as the ``sbemu`` console script."""

from sbemu.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
