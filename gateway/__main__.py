"""`python -m gateway`: the same as the `shardgate` command."""

import sys

from gateway.cli import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
