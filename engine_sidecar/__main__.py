"""`python -m engine_sidecar`: the same as `shardgate sidecar`."""

import sys

from engine_sidecar.cli import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
