"""Airflow configuration for the embedded default: a project-local AIRFLOW_HOME with SQLite,
this repo's dags/ and plugins/, no examples. Values already in the environment win, so the
same DAGs run against a real Airflow deployment unchanged."""

from __future__ import annotations

import os

from jobs.settings import PROJECT_ROOT


def airflow_env() -> dict[str, str]:
    home = os.environ.get("AIRFLOW_HOME", str(PROJECT_ROOT / ".airflow"))
    return {
        "AIRFLOW_HOME": home,
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": f"{home}/simple_auth_manager_passwords.json",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(PROJECT_ROOT / "var" / "logs" / "airflow"),
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
        "PYTHONPATH": os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p),
    }


def apply_airflow_env() -> dict[str, str]:
    """Set the defaults in this process (before Airflow is imported); return the environment."""
    for k, v in airflow_env().items():
        os.environ.setdefault(k, v)
    return dict(os.environ)
