"""Settings: relative local paths are made absolute once, where they are read (the embedded
broker formats its storage in its own folder; Spark and Airflow tasks may run elsewhere)."""

from __future__ import annotations

from pathlib import Path

from jobs.settings import load_settings


def test_a_variables_relative_paths_are_the_current_folders_and_a_config_files_its_own(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("JOINSHIFT_CONFIG", raising=False)
    s = load_settings({"JOINSHIFT_KAFKA_HOME": "var/kafka", "JOINSHIFT_STORAGE_ROOT": "s3a://bucket/js"})
    assert s.kafka_home == str(tmp_path / "var" / "kafka")
    assert s.storage_root == "s3a://bucket/js"  # a URI is not a local path

    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "joinshift.yaml").write_text("log_dir: logs\nstorage_root: /data/js\nlocal_root: ''\n")
    monkeypatch.setenv("JOINSHIFT_CONFIG", str(conf_dir / "joinshift.yaml"))
    s = load_settings({"JOINSHIFT_JAR_CACHE": "../jars"})
    assert Path(s.log_dir) == conf_dir / "logs" and s.storage_root == "/data/js" and s.local_root == ""
    assert s.jar_cache == str(tmp_path / ".." / "jars")


def test_a_settings_file_that_is_a_folder_or_not_text_is_refused_in_one_line(tmp_path, monkeypatch):
    import pytest

    from jobs.settings import SettingsError

    monkeypatch.setenv("JOINSHIFT_CONFIG", str(tmp_path))
    with pytest.raises(SettingsError, match="a folder: name the settings file in it"):
        load_settings({})
    binary = tmp_path / "joinshift.yaml"
    binary.write_bytes(b"\x7fELF\x02\x01\xd0\xff")
    monkeypatch.setenv("JOINSHIFT_CONFIG", str(binary))
    with pytest.raises(SettingsError, match="not UTF-8 text"):
        load_settings({})


def test_a_variable_for_a_mapping_setting_is_refused_not_ignored(monkeypatch):
    import pytest

    from jobs.settings import SettingsError

    monkeypatch.delenv("JOINSHIFT_CONFIG", raising=False)
    with pytest.raises(
        SettingsError, match=r"JOINSHIFT_SPARK_CONF is not read: spark_conf is a mapping; put `spark_conf:`"
    ):
        load_settings({"JOINSHIFT_SPARK_CONF": '{"spark.sql.shuffle.partitions": "8"}'})
    with pytest.raises(SettingsError, match="JOINSHIFT_KAFKA_PROPERTIES is not read"):
        load_settings({"JOINSHIFT_KAFKA_PROPERTIES": "security.protocol=SSL"})
    assert load_settings({"JOINSHIFT_KAFKA_PROPERTIES_FILE": "client.properties"}).kafka_properties_file


def test_each_setting_says_where_its_value_came_from_and_credentials_are_not_shown(tmp_path, monkeypatch):
    from jobs.settings import resolve_settings, settings_rows

    cfg = tmp_path / "joinshift.yaml"
    cfg.write_text(
        "spark_master: spark://file:7077\n"
        "spark_conf:\n  spark.hadoop.fs.s3a.secret.key: s3cr3t\n  spark.sql.shuffle.partitions: '8'\n"
        "kafka_properties:\n  sasl.jaas.config: hunter2\n  ssl.truststore.password: ${env:TS_PW}\n"
        "  security.protocol: SASL_SSL\n"
    )
    monkeypatch.setenv("JOINSHIFT_CONFIG", str(cfg))
    s, origins = resolve_settings({"JOINSHIFT_SPARK_MASTER": "local[2]", "JOINSHIFT_LOG_DIR": "logs"})
    assert s.spark_master == "local[2]" and origins["spark_master"] == "JOINSHIFT_SPARK_MASTER"  # the variable wins
    assert origins["spark_conf"] == str(cfg) and origins["storage_root"] == "default"
    rows = {name: (value, origin) for name, value, origin in settings_rows(s, origins)}
    assert rows["log_dir"] == (str(Path.cwd() / "logs"), "JOINSHIFT_LOG_DIR")
    assert rows["spark_conf.spark.sql.shuffle.partitions"] == ("8", str(cfg))
    assert rows["spark_conf.spark.hadoop.fs.s3a.secret.key"][0] == "*** (hidden)"
    assert rows["kafka_properties.sasl.jaas.config"][0] == "*** (hidden)"
    assert rows["kafka_properties.ssl.truststore.password"][0] == "${env:TS_PW}"  # it names a secret, holds none
    assert rows["kafka_properties.security.protocol"][0] == "SASL_SSL"  # no credential: shown
    assert rows["local_root"] == ("", "default")
    shown = " ".join(v for v, _ in rows.values())
    assert "s3cr3t" not in shown and "hunter2" not in shown


def test_a_misspelt_variable_is_refused_with_the_setting_it_is_near_and_far_ones_are_left_alone(monkeypatch):
    import pytest

    from jobs.settings import SettingsError

    monkeypatch.delenv("JOINSHIFT_CONFIG", raising=False)
    for typo, meant in [
        ("JOINSHIFT_STORAGE_ROOTS", "JOINSHIFT_STORAGE_ROOT"),
        ("JOINSHIFT_SPARK_MEMORY", "JOINSHIFT_SPARK_DRIVER_MEMORY"),
        ("JOINSHIFT_KAFKA_BOOTSTRAP_SERVERS", "JOINSHIFT_KAFKA_BOOTSTRAP"),
        ("JOINSHIFT_log_dir", "JOINSHIFT_LOG_DIR"),
    ]:
        with pytest.raises(SettingsError, match=f"^{typo} is not a joinshift setting: did you mean {meant}\\?"):
            load_settings({typo: "x"})
    # the tests' and benches' own variables, and the process knobs, are no settings' typos
    env = {"JOINSHIFT_CHAOS_KILLS": "5", "JOINSHIFT_KEEP_TEST_DATA": "1", "JOINSHIFT_SPARK_UI": "true"}
    assert load_settings(env).storage_root == load_settings({}).storage_root


def test_every_joinshift_variable_the_product_reads_is_a_setting_or_a_named_process_knob():
    """So that the typo check above knows every name: a new knob read somewhere in jobs/ must be
    added to ``PROCESS_VARIABLES`` (or be a setting), or a near-miss of it would be refused."""
    import re

    from jobs.settings import _FIELDS, PROCESS_VARIABLES, PROJECT_ROOT

    known = {f"JOINSHIFT_{name.upper()}" for name in _FIELDS} | set(PROCESS_VARIABLES)
    read = set()
    for path in (PROJECT_ROOT / "jobs").rglob("*.py"):
        read |= set(re.findall(r"JOINSHIFT_[A-Z_]*[A-Z]", path.read_text()))
    assert read - known == set()
    assert {"JOINSHIFT_SPARK_UI", "JOINSHIFT_SPARK_CONSOLE_LEVEL"} <= read  # the scan finds reads


def test_a_settings_value_of_the_wrong_kind_or_an_empty_folder_is_refused_in_one_line(tmp_path, monkeypatch):
    """They were tracebacks (`spark_conf: notamap`, `log_dir: 7` far from the file) or silently the
    file system's root (`JOINSHIFT_STORAGE_ROOT=`)."""
    import pytest

    from jobs.settings import SettingsError

    cfg = tmp_path / "joinshift.yaml"
    monkeypatch.setenv("JOINSHIFT_CONFIG", str(cfg))
    for text, says in [
        ("spark_conf: notamap\n", "spark_conf is a mapping of key: value"),
        ("storage_root:\n", "storage_root is None; give it a text value"),
        ("log_dir: [a, b]\n", "log_dir is \\['a', 'b'\\]"),
        ("storage_root: 2026-02-30\n", "day is out of range for month: a value YAML reads as a date"),
    ]:
        cfg.write_text(text)
        with pytest.raises(SettingsError, match=says):
            load_settings({})
    cfg.write_text("spark_driver_memory: 4096\nspark_conf: {spark.ui.enabled: false, spark.cores.max: 2}\n")
    s = load_settings({})
    assert s.spark_driver_memory == "4096" and s.spark_conf == {"spark.ui.enabled": "false", "spark.cores.max": "2"}
    monkeypatch.delenv("JOINSHIFT_CONFIG")
    with pytest.raises(SettingsError, match="^storage_root is empty in JOINSHIFT_STORAGE_ROOT: give a value"):
        load_settings({"JOINSHIFT_STORAGE_ROOT": ""})


def test_a_standalone_master_is_reached_at_any_of_its_addresses_and_other_masters_are_sparks():
    import socket

    import pytest

    from jobs.settings import SettingsError
    from jobs.storage.spark_gateway import SparkMasterUnavailable, _reason, check_master

    with socket.create_server(("127.0.0.1", 0)) as listening:
        port = listening.getsockname()[1]
        check_master(f"spark://127.0.0.1:1,127.0.0.1:{port}")  # a standby that is down is fine
    with pytest.raises(SparkMasterUnavailable, match=r"no Spark master answers at spark://127\.0\.0\.1:1 "):
        check_master("spark://127.0.0.1:1", timeout=1)
    with pytest.raises(SettingsError, match=r"write spark://host:port"):
        check_master("spark://nohost")
    for master in ("local[2]", "yarn", "k8s://https://127.0.0.1:1"):
        check_master(master)  # not reached here: Spark's own
    # the JVM's reason is the line that is not its "Error:" framing
    said = ["Error occurred during initialization of VM", "Could not reserve enough space for 1KB object heap"]
    assert _reason(said) == "Could not reserve enough space for 1KB object heap"
    assert _reason(["Unrecognized VM option 'Bogus'", "Error: Could not create the Java Virtual Machine."]) == (
        "Unrecognized VM option 'Bogus'"
    )
    assert _reason(["Error: A fatal exception has occurred. Program will exit."]) == ""
