"""Where things run and live: storage root, Spark master, Kafka bootstrap servers, local caches.

Resolved in this order (later wins): built-in defaults (the embedded, single-machine setup),
a YAML config file (``$JOINSHIFT_CONFIG`` or ``joinshift.yaml`` in the project root), then
environment variables ``JOINSHIFT_<FIELD>`` (e.g. ``JOINSHIFT_SPARK_MASTER=spark://host:7077``).
The same code then runs on a cluster by changing configuration only.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml

PROJECT_ROOT = Path(__file__).resolve().parent.parent
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
#: What ``spark_remote`` takes: Spark Connect's URL, ``sc://host[:port][/;param=value...]``.
_REMOTE = re.compile(r"^sc://[^/:;\s]+(:\d+)?(/.*)?$")


#: Where ``joinshift`` writes how it ended (``{"pid", "exit_code"}``), when set (``jobs.cli``): the
#: exit status of a supervised stream process whose parent, which alone could wait for it, is gone.
EXIT_FILE_ENV = "JOINSHIFT_EXIT_FILE"
#: ``JOINSHIFT_*`` variables that are not settings but knobs of one process: the settings file's
#: path, Spark's UI (the benches' stage times), its log level, the console's (``-v`` sets it), and
#: where to say how it ended.
PROCESS_VARIABLES = (
    "JOINSHIFT_CONFIG",
    "JOINSHIFT_SPARK_UI",
    "JOINSHIFT_SPARK_LOG_LEVEL",
    "JOINSHIFT_SPARK_CONSOLE_LEVEL",
    EXIT_FILE_ENV,
)


class SettingsError(ValueError):
    """The configuration (file or ``JOINSHIFT_*`` variables) is wrong; the message says where and how."""


@dataclass(frozen=True)
class Settings:
    #: Root for Delta tables, checkpoints, progress logs and run records: a local path or a URI
    #: (``s3a://bucket/prefix``), reached through ``jobs.storage.fs``.
    storage_root: str = str(PROJECT_ROOT / "var" / "storage")
    #: Spark master URL; ``local[*]`` by default.
    spark_master: str = "local[*]"
    #: A Spark Connect server (``sc://host:port``) the short steps use instead of starting a driver
    #: JVM of their own; empty: every process starts its own Spark (README, "One Spark for many steps").
    spark_remote: str = ""
    #: Kafka bootstrap servers; empty means "the embedded broker this project starts".
    kafka_bootstrap: str = ""
    #: Embedded broker's data, config and logs.
    kafka_home: str = str(PROJECT_ROOT / "var" / "kafka")
    #: JVM jars resolved once by set-up (Spark connectors, the Kafka broker).
    jar_cache: str = str(PROJECT_ROOT / ".cache" / "jars")
    #: Logs of the embedded services and jobs.
    log_dir: str = str(PROJECT_ROOT / "var" / "logs")
    #: Spark driver memory for local runs.
    spark_driver_memory: str = "4g"
    #: More options for the Spark driver's JVM, after joinshift's own (its log configuration and
    #: set-up's class archive), e.g. ``-XX:+HeapDumpOnOutOfMemoryError``.
    spark_driver_java_options: str = ""
    #: Extra Spark conf, ``{key: value}`` (config file only). ``spark.hadoop.*`` keys configure the
    #: file system of a URI storage root, e.g. S3A's endpoint (README, "Storage on an object store").
    spark_conf: dict[str, str] = field(default_factory=dict)
    #: Kafka client properties (Java names) for every client: a ``client.properties`` file ...
    kafka_properties_file: str = ""
    #: ... overlaid with these (config file only); values may be ``${env:NAME}`` / ``${file:/path}``.
    kafka_properties: dict[str, str] = field(default_factory=dict)
    #: Files about this machine's processes (pid files, holds, supervision state, health samples)
    #: and the reports the Airflow UI serves from disk: a local folder. Empty: the storage root
    #: when that is local, else ``var/local`` in the project.
    local_root: str = ""

    def path(self, *parts: str) -> str:
        """A location under the storage root (a local path or a URI: read it through ``jobs.storage.fs``)."""
        return "/".join([self.storage_root.rstrip("/"), *parts])

    def local_path(self, *parts: str) -> Path:
        """A location on this machine's disk for files that only make sense here (see ``local_root``)."""
        root = self.local_root
        if not root:
            remote = _SCHEME.match(self.storage_root) and not self.storage_root.startswith("file:")
            root = str(PROJECT_ROOT / "var" / "local") if remote else self.storage_root
        root = root.removeprefix("file:")
        return Path("/" + root.lstrip("/") if root.startswith("//") else root, *parts)

    def table_path(self, pipeline: str, table: str) -> str:
        return self.path("tables", pipeline, table)

    def checkpoint_path(self, pipeline: str, query: str) -> str:
        return self.path("checkpoints", pipeline, query)


_FIELDS = {f.name: f for f in dataclasses.fields(Settings)}


def _config_file() -> Path | None:
    explicit = os.environ.get("JOINSHIFT_CONFIG")
    if explicit:
        p = Path(explicit)
        if p.is_dir():
            raise SettingsError(f"JOINSHIFT_CONFIG points to {p}, a folder: name the settings file in it")
        if not p.is_file():
            raise SettingsError(f"JOINSHIFT_CONFIG points to {p}, which does not exist: fix the path or unset it")
        return p
    default = PROJECT_ROOT / "joinshift.yaml"
    return default if default.is_file() else None


#: Settings naming a folder or file on this machine (the storage root: when it is not a URI).
_LOCAL_PATHS = ("storage_root", "kafka_home", "jar_cache", "log_dir", "local_root", "kafka_properties_file")


def _absolute(values: dict, base: Path) -> dict:
    """Relative local paths made absolute: a variable's against the current folder, a config
    file's against the file's folder. The embedded broker and Spark run in other folders."""
    return {
        k: str(base / v)
        if k in _LOCAL_PATHS and isinstance(v, str) and v and not _SCHEME.match(v) and not os.path.isabs(v)
        else v
        for k, v in values.items()
    }


#: Settings that are mappings: the settings file only, no variable.
_MAPPINGS = ("spark_conf", "kafka_properties")
#: Settings that cannot be empty (an empty storage root would mean the file system's root).
_REQUIRED = ("storage_root", "spark_master", "kafka_home", "jar_cache", "log_dir", "spark_driver_memory")


def _typed(data: dict, where: str) -> dict:
    """A settings file's values as the settings take them: text (a number as its text), or a
    mapping of text for the mappings; anything else is refused in one line."""
    out: dict[str, object] = {}
    for name, value in data.items():
        if name in _MAPPINGS:
            if not isinstance(value, dict) or any(isinstance(v, (dict, list)) or v is None for v in value.values()):
                raise SettingsError(f"{where}: {name} is a mapping of key: value, e.g. {name}: {{key: value}}")
            out[name] = {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
        elif isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise SettingsError(f"{where}: {name} is {value!r}; give it a text value, or remove it for the default")
        else:
            out[name] = str(value)
    return out


def load_settings(env: dict[str, str] | None = None) -> Settings:
    """Defaults, then the config file, then ``JOINSHIFT_*`` environment variables."""
    return resolve_settings(env)[0]


def resolve_settings(env: dict[str, str] | None = None) -> tuple[Settings, dict[str, str]]:
    """The settings, and where each one's value came from: ``default``, the settings file's path,
    or the ``JOINSHIFT_*`` variable's name (``joinshift settings`` shows both)."""
    env = dict(os.environ if env is None else env)
    values: dict[str, object] = {}
    origins = dict.fromkeys(_FIELDS, "default")
    cfg = _config_file()
    if cfg is not None:
        try:
            data = yaml.safe_load(cfg.read_text()) or {}
        except yaml.YAMLError as exc:
            raise SettingsError(f"{cfg}: not valid YAML ({' '.join(str(exc).split())})") from None
        except UnicodeDecodeError:
            raise SettingsError(f"{cfg}: not UTF-8 text; a settings file is YAML") from None
        except ValueError as exc:  # PyYAML reads 2026-02-30 as a date, and fails building it
            raise SettingsError(f"{cfg}: {exc}: a value YAML reads as a date or time is not one; quote it") from None
        except OSError as exc:
            raise SettingsError(f"{cfg}: cannot be read ({exc.strerror}); check its permissions") from None
        if not isinstance(data, dict):
            raise SettingsError(f"{cfg}: a settings file is a YAML mapping of setting: value")
        unknown = set(data) - set(_FIELDS)
        if unknown:
            raise SettingsError(f"{cfg}: unknown setting(s) {', '.join(sorted(unknown))}; known: {', '.join(_FIELDS)}")
        values.update(_absolute(_typed(data, str(cfg)), cfg.parent))
        origins.update(dict.fromkeys(data, str(cfg)))
    for name in _FIELDS:
        key = f"JOINSHIFT_{name.upper()}"
        if key in env and name in _MAPPINGS:  # set but never read would be a setting silently lost
            raise SettingsError(
                f"{key} is not read: {name} is a mapping; put `{name}:` in the settings file "
                "(JOINSHIFT_CONFIG or joinshift.yaml) and unset the variable"
            )
        if key in env:
            values.update(_absolute({name: env[key]}, Path.cwd()))
            origins[name] = key
    _refuse_misspelt(env)
    for name in _REQUIRED:
        if name in values and not values[name]:
            raise SettingsError(
                f"{name} is empty in {origins[name]}: give a value, or remove it for the default "
                f"({getattr(Settings(), name)})"
            )
    remote = values.get("spark_remote")
    if remote and not _REMOTE.match(str(remote)):
        where = "JOINSHIFT_SPARK_REMOTE" if "JOINSHIFT_SPARK_REMOTE" in env else str(cfg)
        raise SettingsError(
            f"{where}: spark_remote {remote!r} is not a Spark Connect URL; use sc://host:port, e.g. sc://127.0.0.1:15002"
        )
    return Settings(**values), origins  # type: ignore[arg-type]


def _refuse_misspelt(env: dict[str, str]) -> None:
    """A ``JOINSHIFT_*`` variable that is none of ours but close to one is a typo whose setting
    would silently keep its default (a misspelt storage root writes the tables elsewhere).
    Variables far from every name are left alone: tests and benches have their own."""
    known = [f"JOINSHIFT_{name.upper()}" for name in _FIELDS] + list(PROCESS_VARIABLES)
    suffixes = {k.removeprefix("JOINSHIFT_"): k for k in known}
    for key in sorted(env):
        if not key.upper().startswith("JOINSHIFT_") or key in known:
            continue
        near = difflib.get_close_matches(key[len("JOINSHIFT_") :].upper(), suffixes, n=1, cutoff=0.75)
        if near:
            raise SettingsError(
                f"{key} is not a joinshift setting: did you mean {suffixes[near[0]]}? Rename or unset it"
            )


#: A value's reference to a secret kept elsewhere, resolved when a client is made and never
#: logged: ``${env:NAME}`` or ``${file:/path}`` (Kafka properties; ``jobs.storage.kafka_config``).
SECRET_REFERENCE = re.compile(r"\$\{(env|file):([^}]+)\}")
#: Keys whose values are credentials (``ssl.key.password``, ``sasl.jaas.config``,
#: ``spark.hadoop.fs.s3a.secret.key``): never printed by ``joinshift settings``.
_CREDENTIAL_KEY = re.compile(r"(?i)(secret|password|passwd|token|credential|jaas|(^|[._])key$)")


def _shown(key: str, value: object) -> str:
    text = str(value)
    if _CREDENTIAL_KEY.search(key) and not SECRET_REFERENCE.fullmatch(text):
        return "*** (hidden)"
    return text


def settings_rows(s: Settings, origins: dict[str, str]) -> list[tuple[str, str, str]]:
    """``(setting, value, where it came from)`` for each setting, a mapping's entries one a row
    (``spark_conf.spark.sql.shuffle.partitions``). An entry whose key names a credential is hidden
    unless its value only names a secret (``${env:NAME}``)."""
    rows: list[tuple[str, str, str]] = []
    for name in _FIELDS:
        value = getattr(s, name)
        if name in _MAPPINGS:
            rows += [(f"{name}.{k}", _shown(k, v), origins[name]) for k, v in value.items()]
            if not value:
                rows.append((name, "", origins[name]))
        else:
            rows.append((name, str(value), origins[name]))
    return rows


@lru_cache(maxsize=1)
def settings() -> Settings:
    """The process-wide settings (read once)."""
    return load_settings()


def settings_env(s: Settings) -> dict[str, str]:
    """``JOINSHIFT_*`` variables that make a child process resolve the same settings as ``s``."""
    return {
        f"JOINSHIFT_{f.name.upper()}": v
        for f in dataclasses.fields(Settings)
        if isinstance(v := getattr(s, f.name), str)
    }
