"""Screenshot the "Join accuracy" page of the Airflow UI (plugins/joinshift_ui.py), for real.

Starts ``airflow standalone`` on a free port in a throw-away AIRFLOW_HOME, logs in through
Airflow's own login form in headless Chromium (Playwright), opens the page inside the Airflow UI
and saves a screenshot; then stops everything::

    python -m bench.ui_screenshot /tmp/join_accuracy.png                  # example reports, 3 days
    python -m bench.ui_screenshot /tmp/ui.png --storage-root var/storage  # your own reports

Writes ``OUT`` (the page inside the Airflow UI) and ``OUT`` with ``.full`` before the suffix
(the plugin page alone, full height). Needs Chromium (``/usr/bin/chromium``, Debian package
``chromium``) and Playwright (the ``dev`` extra; no browser download). The work is done by
:func:`jobs.local.airflow_ui.screenshot_plugin_page`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    from jobs.local.airflow_ui import screenshot_plugin_page

    p = argparse.ArgumentParser(prog="python -m bench.ui_screenshot", description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="PNG to write (the page inside the Airflow UI)")
    p.add_argument(
        "--storage-root", type=Path, default=None, help="read <storage-root>/reports instead of writing example reports"
    )
    p.add_argument("--width", type=int, default=1440)
    p.add_argument("--height", type=int, default=1000)
    p.add_argument("--keep", action="store_true", help="keep the temporary AIRFLOW_HOME and logs")
    a = p.parse_args(argv)
    written = screenshot_plugin_page(
        a.out.resolve(), a.storage_root, width=a.width, height=a.height, keep=a.keep, log=lambda m: print(m, flush=True)
    )
    for f in written:
        print(f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
