"""The docker-compose cluster: services, wiring, pinned versions, and agreement with the code,
including the topology ``tests/integration/test_cluster.py`` proves on loopback (3 KRaft nodes with
replication factor 3 and min ISR 2, a Spark master and two workers).

Pure file checks (pyyaml); no Docker engine needed. If a ``docker compose`` client is on the
machine, ``docker compose config -q`` validates the file against the Compose spec as well.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from jobs.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKER_DIR = ROOT / "include" / "docker"
DOCKERFILE = DOCKER_DIR / "Dockerfile.airflow"
ENV_EXAMPLE = DOCKER_DIR / "compose.env.example"

KAFKA_NODES = ["kafka-1", "kafka-2", "kafka-3"]
SPARK_WORKERS = ["spark-worker-1", "spark-worker-2"]
SERVICES = {
    *KAFKA_NODES,
    "spark-master",
    *SPARK_WORKERS,
    "postgres",
    "airflow-init",
    "airflow-api-server",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
}
AIRFLOW_SERVICES = sorted(s for s in SERVICES if s.startswith("airflow-"))
LONG_RUNNING_AIRFLOW = [s for s in AIRFLOW_SERVICES if s != "airflow-init"]
STORAGE_ROOT = "/data/joinshift"
BOOTSTRAP = "kafka-1:9092,kafka-2:9092,kafka-3:9092"
CODE_MOUNTS = {"dags", "jobs", "plugins", "include", "expectations"}

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")


def interpolate(value, env: dict[str, str] | None = None):
    """Compose's ``${VAR:-default}`` / ``$$`` rules, with ``env`` (default: no variables set)."""
    env = env or {}
    if isinstance(value, str):
        value = _VAR.sub(lambda m: env.get(m.group(1)) or (m.group(2) or ""), value.replace("$$", "\0"))
        return value.replace("\0", "$")
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    return value


@pytest.fixture(scope="module")
def raw() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def compose(raw) -> dict:
    """The compose file as the engine sees it with no .env (anchors merged, defaults applied)."""
    return interpolate(raw)


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def env_of(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def mounts_of(service: dict) -> dict[str, str]:
    """``{container path: source}`` from short-syntax volume entries."""
    out = {}
    for v in service.get("volumes") or []:
        source, target = v.split(":")[:2]
        out[target] = source
    return out


def gib(size: str) -> float:
    """``"6g"`` -> 6.0, ``"512m"`` -> 0.5 (Spark's memory strings)."""
    return float(size[:-1]) / (1 if size[-1] in "gG" else 1024)


def pins() -> dict[str, str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pinned = (d.replace(" ", "").split("==", 1) for d in deps if "==" in d)
    return {re.sub(r"\[.*\]$", "", name): version for name, version in pinned}  # pyspark[connect] -> pyspark


# --- shape ---------------------------------------------------------------------------------


def test_compose_has_every_service(services):
    assert set(services) >= SERVICES, f"missing: {sorted(SERVICES - set(services))}"


def test_every_long_running_service_has_a_healthcheck(services):
    missing = [n for n, s in services.items() if n != "airflow-init" and "healthcheck" not in s]
    assert not missing, f"no healthcheck: {missing}"


def test_airflow_services_wait_for_the_database_and_init(services):
    assert services["airflow-init"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in LONG_RUNNING_AIRFLOW:
        deps = services[name]["depends_on"]
        assert deps["postgres"]["condition"] == "service_healthy", name
        assert deps["airflow-init"]["condition"] == "service_completed_successfully", name


def test_scheduler_runs_tasks_only_once_kafka_and_spark_are_healthy(services):
    deps = services["airflow-scheduler"]["depends_on"]
    for needed in (*KAFKA_NODES, *SPARK_WORKERS, "airflow-api-server"):
        assert deps[needed]["condition"] == "service_healthy", needed
    for worker in SPARK_WORKERS:
        assert services[worker]["depends_on"]["spark-master"]["condition"] == "service_healthy"


def test_named_volumes_are_declared(compose, services):
    declared = set(compose.get("volumes") or {})
    for name, svc in services.items():
        for target, source in mounts_of(svc).items():
            if not source.startswith((".", "/")):
                assert source in declared, f"{name}: volume {source} ({target}) is not declared"


# --- Airflow -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", AIRFLOW_SERVICES)
def test_airflow_service_points_the_code_at_the_cluster(services, name):
    env = env_of(services[name])
    assert env["JOINSHIFT_KAFKA_BOOTSTRAP"] == BOOTSTRAP
    assert env["JOINSHIFT_SPARK_MASTER"] == "spark://spark-master:7077"
    assert env["JOINSHIFT_STORAGE_ROOT"] == STORAGE_ROOT
    assert env["JOINSHIFT_JAR_CACHE"] == "/opt/joinshift/jars"
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "false"
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/airflow/dags"
    assert env["AIRFLOW__API_AUTH__JWT_SECRET"], "components must share a fixed JWT secret"
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"].startswith("http://airflow-api-server:8080/")


@pytest.mark.parametrize("name", AIRFLOW_SERVICES)
def test_airflow_service_mounts_code_and_the_storage_root(services, name):
    mounts = mounts_of(services[name])
    for d in CODE_MOUNTS:
        assert mounts.get(f"/opt/airflow/{d}") == f"./{d}", f"{name}: ./{d} not mounted"
    assert mounts.get(STORAGE_ROOT) == "joinshift-data"


@pytest.mark.parametrize("name", AIRFLOW_SERVICES)
def test_airflow_service_is_built_from_the_project_dockerfile(services, name):
    build = services[name]["build"]
    assert (ROOT / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE


def test_api_server_is_the_ui_on_8080(services):
    assert services["airflow-api-server"]["command"] == "api-server"
    assert "8080:8080" in services["airflow-api-server"]["ports"]


@pytest.mark.parametrize("name", SPARK_WORKERS)
def test_driver_and_executors_share_storage_and_uid(services, name):
    worker = services[name]
    assert mounts_of(worker).get(STORAGE_ROOT) == "joinshift-data"
    assert worker["user"] == services["airflow-scheduler"]["user"] == "50000:0"


def test_cluster_settings_file_loads_with_the_compose_environment(services, monkeypatch):
    env = env_of(services["airflow-scheduler"])
    config = env["JOINSHIFT_CONFIG"]
    assert config.startswith("/opt/airflow/include/"), "the config file must be in a mounted dir"
    # The settings file is found through os.environ: point it at the checkout's copy.
    local = ROOT / "include" / config.removeprefix("/opt/airflow/include/")
    monkeypatch.setenv("JOINSHIFT_CONFIG", str(local))
    s = load_settings(env)
    assert (s.storage_root, s.spark_master, s.kafka_bootstrap) == (
        STORAGE_ROOT,
        "spark://spark-master:7077",
        BOOTSTRAP,
    )
    # Two applications (the streaming join and a batch job) fit on the default workers, each
    # worker holding as many executors as it has cores for, each with its memory.
    workers = [env_of(services[w]) for w in SPARK_WORKERS]
    executor_cores = int(s.spark_conf["spark.executor.cores"])
    assert 2 * int(s.spark_conf["spark.cores.max"]) <= sum(int(w["SPARK_WORKER_CORES"]) for w in workers)
    for w in workers:
        executors = int(w["SPARK_WORKER_CORES"]) // executor_cores
        assert executors * gib(s.spark_conf["spark.executor.memory"]) <= gib(w["SPARK_WORKER_MEMORY"])
    # ... and one application's executors spread over both workers, as in the cluster test
    assert int(s.spark_conf["spark.cores.max"]) // executor_cores >= len(SPARK_WORKERS)


# --- Kafka ---------------------------------------------------------------------------------


def _listeners(value: str) -> dict[str, str]:
    """``NAME://host:port,...`` -> ``{host:port: NAME}``."""
    return dict(reversed(x.split("://", 1)) for x in value.split(","))


@pytest.mark.parametrize("name", KAFKA_NODES)
def test_kafka_node_is_a_kraft_broker_and_controller_with_internal_and_external_listeners(services, name):
    node = services[name]
    env = env_of(node)
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert node["hostname"] == name
    advertised = _listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    # The internal listener is an address JOINSHIFT_KAFKA_BOOTSTRAP names.
    assert advertised[f"{name}:9092"] == "PLAINTEXT"
    assert f"{name}:9092" in BOOTSTRAP.split(",")
    external = [addr for addr, listener in advertised.items() if listener == "EXTERNAL"]
    assert len(external) == 1 and external[0].startswith("localhost:"), "no listener advertised to the host"
    assert f"{external[0].split(':')[1]}:9094" in node["ports"]


def test_kafka_is_three_nodes_in_one_controller_quorum(services):
    """The topology of tests/integration/test_cluster.py (jobs/local/kafka_cluster.py)."""
    from jobs.local.kafka_cluster import NODES

    envs = {name: env_of(services[name]) for name in KAFKA_NODES}
    assert len(envs) == NODES
    ids = {name: env["KAFKA_NODE_ID"] for name, env in envs.items()}
    assert sorted(ids.values()) == ["1", "2", "3"]
    voters = {f"{i}@{name}:9093" for name, i in ids.items()}
    for name, env in envs.items():
        assert set(env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")) == voters, name
        assert "CONTROLLER://:9093" in env["KAFKA_LISTENERS"].split(","), name
    assert len({env["CLUSTER_ID"] for env in envs.values()}) == 1
    host_ports = [p.split(":")[0] for name in KAFKA_NODES for p in services[name]["ports"]]
    assert len(set(host_ports)) == NODES, "each node needs its own host port"
    assert len({mounts_of(services[name])["/var/lib/kafka/data"] for name in KAFKA_NODES}) == NODES


@pytest.mark.parametrize("name", KAFKA_NODES)
def test_kafka_replicates_as_the_cluster_test_does(services, name, tmp_path):
    """Replication factor 3 and min ISR 2, internal topics included: what the cluster test proves
    survives a partition leader's SIGKILL (jobs/local/kafka_cluster.py's broker settings)."""
    from jobs.local.kafka_cluster import KafkaCluster
    from jobs.local.kafka_setup import replicated_settings

    proven = KafkaCluster(tmp_path).broker_settings
    env = env_of(services[name])
    assert env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == "3" and env["KAFKA_MIN_INSYNC_REPLICAS"] == "2"
    for key in replicated_settings(3, 2):
        var = "KAFKA_" + key.upper().replace(".", "_")
        assert env.get(var) == proven[key], f"{name}: {var} != the cluster test's {key}"


@pytest.mark.parametrize("name", KAFKA_NODES)
def test_kafka_keeps_records_with_historical_timestamps(services, name):
    env = env_of(services[name])
    assert env["KAFKA_LOG_RETENTION_MS"] == "-1"
    assert env["KAFKA_LOG_RETENTION_BYTES"] == "-1"
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "true"


@pytest.mark.parametrize("name", KAFKA_NODES)
def test_kafka_agrees_with_the_embedded_broker(services, name):
    """Data-keeping settings must match jobs/local/kafka_setup.py, so all brokers behave alike."""
    from jobs.local.kafka_broker import BROKER_SETTINGS

    env = env_of(services[name])
    keys = [
        "log.retention.ms",
        "log.retention.bytes",
        "log.cleanup.policy",
        "log.message.timestamp.type",
        "log.message.timestamp.before.max.ms",
        "log.message.timestamp.after.max.ms",
        "auto.create.topics.enable",
        "offsets.retention.minutes",
    ]
    for key in keys:
        if key in BROKER_SETTINGS:
            var = "KAFKA_" + key.upper().replace(".", "_")
            assert env.get(var) == BROKER_SETTINGS[key], f"{var} != embedded broker's {key}"


# --- Spark ---------------------------------------------------------------------------------


def test_spark_is_a_master_and_two_workers_as_in_the_cluster_test(services):
    """The topology of tests/integration/test_cluster.py (jobs/local/spark_cluster.py's default)."""
    import inspect

    from jobs.local.spark_cluster import SparkCluster

    assert inspect.signature(SparkCluster).parameters["workers"].default == len(SPARK_WORKERS)
    master = services["spark-master"]["command"]
    assert master[1] == "org.apache.spark.deploy.master.Master"
    assert master[master.index("--port") + 1] == "7077"
    for name in SPARK_WORKERS:
        worker = services[name]
        cmd = worker["command"]
        assert cmd[1] == "org.apache.spark.deploy.worker.Worker"
        assert cmd[-1] == "spark://spark-master:7077"
        assert cmd[cmd.index("--host") + 1] == worker["hostname"] == name
        # healthy once the master counts this very worker alive
        assert f"'{name}'" in " ".join(worker["healthcheck"]["test"])
    ui_ports = [p.split(":")[0] for name in ("spark-master", *SPARK_WORKERS) for p in services[name]["ports"]]
    assert len(set(ui_ports)) == len(ui_ports), "each Spark UI needs its own host port"
    for name in ("spark-master", *SPARK_WORKERS):  # the daemons' JVM options, as the cluster test runs them
        assert services[name]["environment"]["SPARK_DAEMON_JAVA_OPTS"] == SparkCluster.DAEMON_JAVA_OPTS


# --- versions --------------------------------------------------------------------------------


def test_image_tags_match_the_pinned_versions(services):
    p = pins()
    for name in KAFKA_NODES:
        assert services[name]["image"] == "apache/kafka:4.1.1"
    for name in ("spark-master", *SPARK_WORKERS):
        image = services[name]["image"]
        assert image.startswith(f"apache/spark:{p['pyspark']}-"), image
        assert image.startswith("apache/spark:4.2.0-") and "java17" in image and "python3" in image
    froms = re.findall(r"^FROM\s+(\S+)", DOCKERFILE.read_text(), re.M)
    airflow = [f for f in froms if f.startswith("apache/airflow:")]
    assert airflow and set(airflow) == {f"apache/airflow:{p['apache-airflow']}-python3.11"}
    assert p["apache-airflow"] == "3.3.2" and p["pyspark"] == "4.2.0"


def test_dockerfile_installs_java_17_and_not_the_spark_provider():
    text = DOCKERFILE.read_text()
    assert re.search(r"apt-get install[^\n]*openjdk-17-jre-headless", text)
    assert re.search(r"^ENV JAVA_HOME=\S*java-17", text, re.M)
    installs = " ".join(re.findall(r"pip install[^\n]*", text))
    for forbidden in ("apache-airflow-providers-apache-spark", "pyspark-client", "great-expectations[spark]"):
        assert forbidden not in installs
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not [d for d in deps if d.startswith(("apache-airflow-providers-apache-spark", "pyspark-client"))]
    assert not [d for d in deps if d.replace(" ", "").startswith("great-expectations[")]


def test_dockerfile_bakes_the_jar_cache_compose_points_at(services):
    text = DOCKERFILE.read_text()
    jar_cache = env_of(services["airflow-scheduler"])["JOINSHIFT_JAR_CACHE"]
    assert f"{jar_cache}/spark/" in text
    assert "build/spark/pom.xml" in text and "copy-dependencies" in text


def test_dockerfile_compiles_joinshifts_jvm_classes_by_set_ups_recipe_into_the_jar_cache(services):
    """A throw-away JDK stage runs build/jvm/compile.sh, set-up's own recipe, against the image's
    pyspark; the image gets the jar where a driver looks for it (``OWN_JAR`` under the jar cache
    compose names) and keeps the JRE; check_image.py fails the build without the jar."""
    from jobs.storage.spark import OWN_JAR

    text = DOCKERFILE.read_text()
    stages = re.split(r"^FROM\s", text, flags=re.M)[1:]
    jdk = [s for s in stages if s.startswith("runtime AS jvm-classes")]
    assert len(jdk) == 1 and "openjdk-17-jdk-headless" in jdk[0]
    assert "COPY --chown=airflow:0 build/jvm " in jdk[0] and '/jvm/compile.sh "$pyspark_jars" ' in jdk[0]
    image = stages[-1]
    assert image.startswith("runtime\n") and "jdk" not in image.replace("jvm-classes", "")
    jar_cache = env_of(services["airflow-scheduler"])["JOINSHIFT_JAR_CACHE"]
    assert re.search(rf"^COPY --from=jvm-classes .*/joinshift\.jar {re.escape(f'{jar_cache}/{OWN_JAR}')}$", image, re.M)
    assert image.index(str(OWN_JAR)) < image.index("check_image.py --pyproject")
    assert 'build/jvm/compile.sh "$pyspark_jars" "$own"' in (ROOT / "build" / "setup.sh").read_text()


def test_dockerfile_hands_sparks_python_processes_the_installed_pyspark():
    """The image runs set-up's own .pth writer once the dependencies are in, and its check
    (check_image.py, which tests/unit/test_setup.py runs against .venv) fails the build without it."""
    text = DOCKERFILE.read_text()
    assert "build/pyspark_path.py" in text
    runs = [m.start() for m in re.finditer(r"python /opt/joinshift/pyspark_path\.py", text)]
    assert len(runs) == 1
    assert text.index("-r /opt/joinshift/requirements.txt") < runs[0] < text.index("check_image.py --pyproject")
    assert "build/pyspark_path.py" in (ROOT / "build" / "setup.sh").read_text()


def test_env_example_lists_the_compose_defaults(raw):
    """include/docker/compose.env.example documents exactly the variables and defaults the file uses."""
    defaults: dict[str, str] = {}
    for m in _VAR.finditer(COMPOSE.read_text().replace("$$", "\0")):  # $$ is a literal $
        defaults.setdefault(m.group(1), m.group(2) or "")
    example = dict(
        line.split("=", 1) for line in ENV_EXAMPLE.read_text().splitlines() if line.strip() and not line.startswith("#")
    )
    assert example == defaults


# --- the real Compose implementation, when there is one ---------------------------------------


def _compose_cmd() -> list[str] | None:
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, timeout=30)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        probe = subprocess.run(["docker-compose", "version"], capture_output=True, text=True, timeout=30)
        if probe.returncode == 0 and re.search(r"v?[2-9]\.\d", probe.stdout):
            return ["docker-compose"]
    return None


def test_docker_compose_config_validates():
    cmd = _compose_cmd()
    if cmd is None:
        reason = (
            "the docker client has no compose plugin" if shutil.which("docker") else "no docker client on this machine"
        )
        pytest.skip(f"{reason} (docker compose config -q needs one; no engine is needed)")
    res = subprocess.run(
        [*cmd, "-f", str(COMPOSE), "config", "-q"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
