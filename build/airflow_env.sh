# Airflow configuration for the embedded default: project-local home, SQLite, this repo's DAGs
# and plugins, no examples. Sourced by the Makefile targets and tests.
_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export AIRFLOW_HOME="${AIRFLOW_HOME:-$_root/.airflow}"
export AIRFLOW__CORE__DAGS_FOLDER="$_root/dags"
export AIRFLOW__CORE__PLUGINS_FOLDER="$_root/plugins"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="sqlite:///$AIRFLOW_HOME/airflow.db"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS:-admin:admin}"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE="$AIRFLOW_HOME/simple_auth_manager_passwords.json"
export AIRFLOW__LOGGING__BASE_LOG_FOLDER="$_root/var/logs/airflow"
export PYTHONPATH="$_root${PYTHONPATH:+:$PYTHONPATH}"
