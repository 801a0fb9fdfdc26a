"""`python -m drill`: the same as `shardgate drill`."""

import sys

from drill.cli import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
