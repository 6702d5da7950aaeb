"""Screenshot the "Join accuracy" page of the Airflow UI (plugins/joinshift_ui.py), for real.

Starts ``airflow standalone`` on a free port in a throw-away AIRFLOW_HOME (this project's
dags/ and plugins/, SimpleAuthManager user ``admin`` with a password written here), logs in
through Airflow's own login form in headless Chromium (driven over the DevTools protocol),
opens the page inside the Airflow UI and saves a screenshot; then stops everything::

    python -m bench.ui_screenshot /tmp/join_accuracy.png                  # example reports, 3 days
    python -m bench.ui_screenshot /tmp/ui.png --storage-root var/storage  # your own reports

Writes ``OUT`` (the page inside the Airflow UI) and ``OUT`` with ``.full`` before the suffix
(the plugin page alone, full height). Needs Chromium (``/usr/bin/chromium``, Debian package
``chromium``) and the ``websockets`` package (installed with Airflow).

The helpers (:class:`AirflowStandalone`, :class:`Chromium`, :func:`login`) are also used by
``tests/integration/test_ui_plugin.py``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import inspect
import itertools
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

VENV_BIN = Path(sys.executable).parent
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio", "--no-proxy-server")
PLUGIN_ROUTE = "plugin/join-accuracy"
EXAMPLE_DAYS = ("2026-11-18", "2026-11-19", "2026-11-20")


#: Everything here talks to 127.0.0.1: never through an HTTP proxy from the environment.
_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def write_example_reports(storage_root: Path, days: tuple[str, ...] = EXAMPLE_DAYS) -> Path:
    """``<storage_root>/reports/search_sessions/<ds>/`` for each day, as the report DAG writes them."""
    from jobs.report.render import example_data, publish_report

    reports = Path(storage_root) / "reports"
    for i, ds in enumerate(days):
        publish_report(example_data(ds=ds, days=10, seed=7 + i), reports)
    return reports


# --------------------------------------------------------------------------------------------
# airflow standalone
# --------------------------------------------------------------------------------------------


class AirflowStandalone:
    """``airflow standalone`` in its own process group, with this project's Airflow env
    (``jobs.airflow_env.airflow_env()``) but a private AIRFLOW_HOME, port and password."""

    def __init__(self, home: Path, storage_root: Path, *, port: int | None = None,
                 password: str = "testpass", db: Path | None = None) -> None:
        self.home = Path(home)
        self.storage_root = Path(storage_root)
        self.port = port or free_port()
        self.password = password
        self.db = db
        self.proc: subprocess.Popen | None = None
        self.log_path = self.home / "standalone.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        from jobs.local.airflow_env import airflow_env

        home = str(self.home)
        env = dict(os.environ)
        env.update(airflow_env())
        env.update({
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
            # the scheduler's and triggerer's log servers: free ports too, not the fixed 8793/8794
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),
            "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
            "JOINSHIFT_STORAGE_ROOT": str(self.storage_root),
            "PATH": os.pathsep.join([str(VENV_BIN), env.get("PATH", "")]),  # standalone runs `airflow ...`
        })
        return env

    def start(self) -> AirflowStandalone:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "simple_auth_manager_passwords.json").write_text(json.dumps({"admin": self.password}))
        if self.db is not None and Path(self.db).exists():
            shutil.copy(self.db, self.home / "airflow.db")
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([str(VENV_BIN / "airflow"), "standalone"], cwd=self.home, env=self.env(),
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        log.close()
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
                raise RuntimeError(f"airflow standalone exited ({self.proc and self.proc.returncode}):\n"
                                   f"{self.log_tail()}")
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
                if not _group_alive(pgid):
                    break
                time.sleep(0.3)
            if not _group_alive(pgid):
                break
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.proc = None
        self.stop_seconds = time.monotonic() - t0

    def __enter__(self) -> AirflowStandalone:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _group_alive(pgid: int) -> bool:
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
# Headless Chromium over the DevTools protocol
# --------------------------------------------------------------------------------------------


class Chromium:
    """A headless Chromium with one page, driven over CDP (``websockets`` sync client)."""

    def __init__(self, user_data_dir: Path, *, width: int = 1440, height: int = 1000,
                 binary: str | None = None) -> None:
        self.user_data_dir = Path(user_data_dir)
        self.width, self.height = width, height
        self.binary = binary or find_chromium()
        if not self.binary:
            raise FileNotFoundError("chromium not found (Debian: apt-get install -y chromium)")
        self.proc: subprocess.Popen | None = None
        self.ws = None
        self._ids = itertools.count(1)
        self._stack = contextlib.ExitStack()

    def start(self, timeout: float = 30) -> Chromium:
        from websockets.sync.client import connect

        self.user_data_dir.mkdir(parents=True, exist_ok=True)
        port_file = self.user_data_dir / "DevToolsActivePort"
        port_file.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [self.binary, *CHROMIUM_FLAGS, f"--user-data-dir={self.user_data_dir}",
             f"--window-size={self.width},{self.height}", "--remote-debugging-address=127.0.0.1",
             "--remote-debugging-port=0", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        deadline = time.monotonic() + timeout
        port = None
        while time.monotonic() < deadline and port is None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            try:
                port = int(port_file.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                time.sleep(0.2)
        if port is None:
            raise TimeoutError("chromium did not open its DevTools port")
        ws_url = None
        while time.monotonic() < deadline and ws_url is None:
            try:
                with _LOCAL.open(f"http://127.0.0.1:{port}/json/list", timeout=3) as r:
                    pages = [t for t in json.load(r) if t.get("type") == "page"]
                ws_url = pages[0]["webSocketDebuggerUrl"] if pages else None
            except (urllib.error.URLError, OSError, ValueError):
                pass
            if ws_url is None:
                time.sleep(0.2)
        if ws_url is None:
            raise TimeoutError("chromium has no page target")
        kwargs = {"max_size": None, "open_timeout": 10}
        if "proxy" in inspect.signature(connect).parameters:  # websockets >= 15 honours proxy env vars
            kwargs["proxy"] = None
        self.ws = self._stack.enter_context(connect(ws_url, **kwargs))
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height,
                  deviceScaleFactor=1, mobile=False)
        return self

    def send(self, method: str, timeout: float = 30, **params):
        msg_id = next(self._ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"CDP {method} timed out")
            msg = json.loads(self.ws.recv(timeout=left))
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"CDP {method}: {msg['error']}")
                return msg.get("result", {})

    def evaluate(self, expression: str):
        res = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"JS error in {expression!r}: {res['exceptionDetails'].get('text')}")
        return res.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 30, what: str | None = None):
        """Poll a JS expression until it is truthy; return its value."""
        deadline = time.monotonic() + timeout
        last_err = None
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
                if value:
                    return value
            except RuntimeError as e:  # navigation in progress, element not there yet
                last_err = e
            time.sleep(0.25)
        raise TimeoutError(f"timed out waiting for {what or expression}"
                           f" (url {self.url()!r}){f': {last_err}' if last_err else ''}")

    def goto(self, url: str, timeout: float = 30) -> None:
        self.send("Page.navigate", url=url)
        time.sleep(0.2)
        self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'",
                      timeout, what=f"load of {url}")

    def url(self) -> str:
        try:
            return self.evaluate("location.href") or ""
        except Exception:
            return ""

    def type_into(self, selector: str, text: str) -> None:
        self.wait_for(f"!!document.querySelector({json.dumps(selector)})", what=selector)
        self.evaluate(f"document.querySelector({json.dumps(selector)}).focus()")
        self.send("Input.insertText", text=text)

    def cookies(self) -> dict[str, str]:
        return {c["name"]: c["value"] for c in self.send("Network.getCookies").get("cookies", [])}

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if full_page:
            h = int(self.evaluate("Math.max(document.documentElement.scrollHeight, document.body.scrollHeight)"))
            self.send("Emulation.setDeviceMetricsOverride", width=self.width, height=max(h, self.height),
                      deviceScaleFactor=1, mobile=False)
            time.sleep(0.3)
        try:
            data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=full_page)["data"]
        finally:
            if full_page:
                self.send("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height,
                          deviceScaleFactor=1, mobile=False)
        path.write_bytes(base64.b64decode(data))
        return path

    def stop(self) -> None:
        if self.ws is not None:
            try:
                self.send("Browser.close", timeout=5)
            except Exception:
                pass
            try:
                self._stack.close()
            except Exception:
                pass
            self.ws = None
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=5)
            self.proc = None

    def __enter__(self) -> Chromium:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def login(browser: Chromium, base_url: str, username: str, password: str, next_path: str = "/") -> None:
    """Through Airflow's own login form (SimpleAuthManager): fill it in, submit, land on ``next_path``."""
    browser.goto(f"{base_url}/auth/login?next={next_path}")
    browser.type_into("input[name=username]", username)
    browser.type_into("input[type=password]", password)
    browser.wait_for("!document.querySelector('button[type=submit]').disabled", what="enabled Sign in")
    browser.evaluate("document.querySelector('button[type=submit]').click()")
    browser.wait_for("!location.pathname.startsWith('/auth/') && document.readyState === 'complete'",
                     timeout=30, what="redirect after login")
    if "_token" not in browser.cookies():
        raise RuntimeError("logged in but no _token cookie was set")


#: JS: the text of the plugin page inside the Airflow UI's iframe ('' until it has loaded).
IFRAME_TEXT = ("(() => { const f = document.querySelector('iframe'); if (!f) return '';"
               " try { const d = f.contentDocument; return d && d.readyState === 'complete'"
               " && d.querySelector('main') ? d.body.innerText : ''; } catch (e) { return ''; } })()")


def open_plugin_in_ui(browser: Chromium, base_url: str, timeout: float = 60) -> str:
    """The Airflow UI's page for the plugin (nav entry → iframe); returns the iframe's text."""
    browser.goto(f"{base_url}/{PLUGIN_ROUTE}")
    text = browser.wait_for(IFRAME_TEXT, timeout=timeout, what="the Join accuracy iframe")
    time.sleep(0.5)  # let the UI chrome settle for the screenshot
    return text


def capture(out: Path, storage_root: Path | None = None, *, width: int = 1440, height: int = 1000,
            keep: bool = False) -> list[Path]:
    """Start Airflow, log in, screenshot the page; return the files written."""
    work = Path(tempfile.mkdtemp(prefix="joinshift-ui-"))
    if storage_root is None:
        storage_root = work / "storage"
        write_example_reports(storage_root)
    password = secrets.token_urlsafe(12)
    project_db = ROOT / ".airflow" / "airflow.db"
    airflow = AirflowStandalone(work / "airflow", Path(storage_root).resolve(), password=password,
                                db=project_db if project_db.exists() else None)
    written = []
    t0 = time.monotonic()
    try:
        airflow.start()
        print(f"airflow standalone on {airflow.url} (log {airflow.log_path}) ...", flush=True)
        airflow.wait_healthy()
        print(f"healthy after {time.monotonic() - t0:.0f}s", flush=True)
        with Chromium(work / "chromium", width=width, height=height) as browser:
            login(browser, airflow.url, "admin", password)
            open_plugin_in_ui(browser, airflow.url)
            written.append(browser.screenshot(out))
            browser.goto(f"{airflow.url}/joinshift/")
            written.append(browser.screenshot(out.with_name(f"{out.stem}.full{out.suffix}"), full_page=True))
        print(f"screenshots after {time.monotonic() - t0:.0f}s", flush=True)
    finally:
        airflow.stop()
        print(f"airflow stopped in {getattr(airflow, 'stop_seconds', 0):.0f}s", flush=True)
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"done in {time.monotonic() - t0:.0f}s", flush=True)
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ui_screenshot", description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="PNG to write (the page inside the Airflow UI)")
    p.add_argument("--storage-root", type=Path, default=None,
                   help="read <storage-root>/reports instead of writing example reports")
    p.add_argument("--width", type=int, default=1440)
    p.add_argument("--height", type=int, default=1000)
    p.add_argument("--keep", action="store_true", help="keep the temporary AIRFLOW_HOME and logs")
    a = p.parse_args(argv)
    for f in capture(a.out.resolve(), a.storage_root, width=a.width, height=a.height, keep=a.keep):
        print(f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
