"""The real Airflow UI on this machine, for the "Join accuracy" page (plugins/joinshift_ui.py).

:class:`AirflowStandalone` runs ``airflow standalone`` on a free port in a throw-away
AIRFLOW_HOME (this project's dags/ and plugins/, SimpleAuthManager user ``admin`` with a
password written there) and stops its whole process group. :func:`chromium_page` is a headless
Chromium page driven by Playwright (Debian's ``/usr/bin/chromium``: nothing is downloaded);
:func:`login` goes through Airflow's own login form and :func:`open_plugin_in_ui` opens the
plugin's nav entry (the page in the UI's iframe). :func:`screenshot_plugin_page` does it all.

Used by ``bench/ui_screenshot.py`` and ``tests/integration/test_ui_plugin.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Self
from urllib.parse import urlparse

from jobs.local.kafka_setup import free_ports
from jobs.settings import PROJECT_ROOT

if TYPE_CHECKING:
    from playwright.sync_api import Frame, Page

VENV_BIN = Path(sys.executable).parent
CHROMIUM_PATH = "/usr/bin/chromium"
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
PLUGIN_ROUTE = "plugin/join-accuracy"
EXAMPLE_DAYS = ("2026-11-18", "2026-11-19", "2026-11-20")

#: Everything here talks to 127.0.0.1: never through an HTTP proxy from the environment.
_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def find_chromium() -> str | None:
    """Debian's Chromium (``apt-get install -y chromium``), else one on PATH; None: none here."""
    if os.access(CHROMIUM_PATH, os.X_OK):
        return CHROMIUM_PATH
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def write_example_reports(storage_root: Path, days: tuple[str, ...] = EXAMPLE_DAYS) -> Path:
    """``<storage_root>/reports/search_sessions/<ds>/`` for each day, as the report DAG writes them."""
    from jobs.report import example_data, publish_report

    reports = Path(storage_root) / "reports"
    for i, ds in enumerate(days):
        publish_report(example_data(ds=ds, days=10, seed=7 + i), reports)
    return reports


# --------------------------------------------------------------------------------------------
# airflow standalone
# --------------------------------------------------------------------------------------------


class AirflowStandalone:
    """``airflow standalone`` in its own process group, with this project's Airflow env
    (``jobs.local.airflow_env.airflow_env()``) but a private AIRFLOW_HOME, port and password."""

    def __init__(
        self,
        home: Path,
        storage_root: Path,
        *,
        port: int | None = None,
        password: str = "testpass",
        db: Path | None = None,
    ) -> None:
        self.home = Path(home)
        self.storage_root = Path(storage_root)
        self.port = port or free_ports(1)[0]
        self.password = password
        self.db = db
        self.proc: subprocess.Popen | None = None
        self.log_path = self.home / "standalone.log"
        self.stop_seconds = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        from jobs.local.airflow_env import airflow_env

        home = str(self.home)
        # the scheduler's and triggerer's log servers: free ports too, not the fixed 8793/8794, and
        # taken in one pick so that they differ from each other and from the API's
        worker_log, trigger_log = [p for p in free_ports(3) if p != self.port][:2]
        env = dict(os.environ)
        env.update(airflow_env())
        env.update(
            {
                "AIRFLOW_HOME": home,
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": f"{home}/simple_auth_manager_passwords.json",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",  # nothing gets scheduled
                "AIRFLOW__CORE__PARALLELISM": "2",  # LocalExecutor forks this many workers (default 32)
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": f"{home}/logs",
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(worker_log),
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(trigger_log),
                "AIRFLOW__API__BASE_URL": self.url,
                "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),
                "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
                "JOINSHIFT_STORAGE_ROOT": str(self.storage_root),
                "PATH": os.pathsep.join([str(VENV_BIN), env.get("PATH", "")]),  # standalone runs `airflow ...`
            }
        )
        return env

    def start(self) -> Self:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "simple_auth_manager_passwords.json").write_text(json.dumps({"admin": self.password}))
        if self.db is not None and Path(self.db).exists():
            shutil.copy(self.db, self.home / "airflow.db")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [str(VENV_BIN / "airflow"), "standalone"],
                cwd=self.home,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def wait_healthy(self, timeout: float = 180) -> None:
        """Until the api-server answers ``/api/v2/monitor/health`` and serves the login page."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(
                    f"airflow standalone exited ({self.proc and self.proc.returncode}):\n{self.log_tail()}"
                )
            try:
                with _LOCAL.open(f"{self.url}/api/v2/monitor/health", timeout=3) as r:
                    if r.status == 200:
                        with _LOCAL.open(f"{self.url}/auth/login", timeout=5) as page:
                            if page.status == 200:
                                return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(1)
        raise TimeoutError(f"airflow standalone not healthy after {timeout:.0f}s:\n{self.log_tail()}")

    def stop(self, timeout: float = 25) -> None:
        """SIGTERM to the whole process group (every component shuts down gracefully on it, in
        ~10 s; SIGINT leaves the scheduler waiting), then SIGKILL whatever is left."""
        if self.proc is None:
            return
        t0 = time.monotonic()
        pgid = self.proc.pid  # start_new_session: the group id is the standalone's pid
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                self.proc.poll()
                if not group_alive(pgid):
                    break
                time.sleep(0.3)
            if not group_alive(pgid):
                break
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.proc = None
        self.stop_seconds = time.monotonic() - t0

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def group_alive(pgid: int) -> bool:
    """Whether a live (non-zombie) process is left in the process group."""
    proc = Path("/proc")
    if proc.is_dir():
        for stat in proc.glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
                return True
        return False
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


# --------------------------------------------------------------------------------------------
# Headless Chromium through Playwright
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def chromium_page(*, width: int = 1440, height: int = 1000, executable_path: str | None = None) -> Iterator[Page]:
    """A page in a fresh headless Chromium (Playwright, sync API); the browser is closed after."""
    from playwright.sync_api import sync_playwright

    binary = executable_path or find_chromium()
    if not binary:
        raise FileNotFoundError("chromium not found (Debian: apt-get install -y chromium)")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=binary, headless=True, args=list(CHROMIUM_ARGS))
        try:
            context = browser.new_context(viewport={"width": width, "height": height})
            yield context.new_page()
        finally:
            browser.close()


def cookies(page: Page) -> dict[str, str]:
    return {c["name"]: c["value"] for c in page.context.cookies()}


def login(page: Page, base_url: str, username: str, password: str, next_path: str = "/") -> None:
    """Through Airflow's own login form (SimpleAuthManager): fill it in, submit, land on ``next_path``."""
    page.goto(f"{base_url}/auth/login?next={next_path}")
    page.fill("input[name=username]", username)
    page.fill("input[type=password]", password)
    page.click("button[type=submit]")  # waits until it is enabled
    page.wait_for_url(lambda url: not urlparse(url).path.startswith("/auth/"), timeout=30_000)
    page.wait_for_load_state("load")
    if "_token" not in cookies(page):
        raise RuntimeError("logged in but no _token cookie was set")


def plugin_frame(page: Page) -> Frame:
    """The frame of the Airflow UI's iframe that shows the plugin page."""
    iframe = page.wait_for_selector("iframe")
    assert iframe is not None  # None only when waiting for "hidden" or "detached"
    frame = iframe.content_frame()
    if frame is None:
        raise RuntimeError("the iframe has no frame")
    return frame


def open_plugin_in_ui(page: Page, base_url: str, timeout: float = 60) -> str:
    """The Airflow UI's page for the plugin (nav entry → iframe); returns the iframe's text."""
    page.goto(f"{base_url}/{PLUGIN_ROUTE}")
    page.frame_locator("iframe").locator("main").wait_for(timeout=timeout * 1000)
    frame = plugin_frame(page)
    frame.wait_for_load_state("load")
    page.wait_for_timeout(500)  # let the UI chrome settle for the screenshot
    return frame.inner_text("body")


def screenshot(page: Page, path: Path, full_page: bool = False) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=full_page)
    return path


def screenshot_plugin_page(
    out: Path,
    storage_root: Path | None = None,
    *,
    width: int = 1440,
    height: int = 1000,
    keep: bool = False,
    log: Callable[[str], None] = print,
) -> list[Path]:
    """Start Airflow, log in, screenshot the page (``out``) and the plugin page alone, full height
    (``out`` with ``.full`` before the suffix); stop Airflow; return the files written."""
    out = Path(out)
    work = Path(tempfile.mkdtemp(prefix="joinshift-ui-"))
    if storage_root is None:
        storage_root = work / "storage"
        write_example_reports(storage_root)
    password = secrets.token_urlsafe(12)
    project_db = PROJECT_ROOT / ".airflow" / "airflow.db"
    airflow = AirflowStandalone(
        work / "airflow",
        Path(storage_root).resolve(),
        password=password,
        db=project_db if project_db.exists() else None,
    )
    written = []
    t0 = time.monotonic()
    try:
        airflow.start()
        log(f"airflow standalone on {airflow.url} (log {airflow.log_path}) ...")
        airflow.wait_healthy()
        log(f"healthy after {time.monotonic() - t0:.0f}s")
        with chromium_page(width=width, height=height) as page:
            login(page, airflow.url, "admin", password)
            open_plugin_in_ui(page, airflow.url)
            written.append(screenshot(page, out))
            page.goto(f"{airflow.url}/joinshift/")
            written.append(screenshot(page, out.with_name(f"{out.stem}.full{out.suffix}"), full_page=True))
        log(f"screenshots after {time.monotonic() - t0:.0f}s")
    finally:
        airflow.stop()
        log(f"airflow stopped in {airflow.stop_seconds:.0f}s")
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    log(f"done in {time.monotonic() - t0:.0f}s")
    return written
