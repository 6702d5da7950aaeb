"""What comparing one ds costs in a warm JVM: ``compare_ds`` (every variant's match rate, hourly
rates and window-boundary deltas, written to the two metrics tables) over the tables ``make demo``
left under the storage root; the first round pays the JVM's warm-up and is reported apart.

    make demo && python -m bench.compare [--ds 2026-11-20] [--rounds 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import date


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n\n")[0])
    p.add_argument("--ds", type=date.fromisoformat, default=date(2026, 11, 20), help="a ds the demo computed")
    p.add_argument("--rounds", type=int, default=4, help="compare_ds calls (the first is the warm-up)")
    args = p.parse_args(argv)

    from jobs.accuracy.compare import compare_ds
    from jobs.settings import settings
    from jobs.spec import load_spec, spec_path
    from jobs.storage import delta_io
    from jobs.storage.spark import get_spark

    s, spec = settings(), load_spec(spec_path())
    spark = get_spark("bench-compare", s, throughput=True)
    times = []
    for i in range(args.rounds):
        t0 = time.monotonic()
        try:
            rows = compare_ds(spark, spec, args.ds, s)
        except delta_io.MissingInput as exc:
            print(f"bench.compare: {exc} (run `make demo` first)", file=sys.stderr)
            return 1
        times.append(time.monotonic() - t0)
        print(f"round {i + 1}: {times[-1]:.2f} s ({len(rows)} variants)", flush=True)
    warm = times[1:] or times
    print(f"compare_ds {args.ds}: first {times[0]:.2f} s, warm median {statistics.median(warm):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
