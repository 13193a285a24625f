# The environment of a local development instance, shared by bin/dev and bin/manage (sourced,
# not run). Expects $root, the project directory. Sets:
#   MOTOR_DATA_DIR  ($root/data unless set): the SQLite database, generated keys, logs
#   DEBUG           (true unless set)
#   SECRET_KEY, MOTOR_CREDENTIALS_KEY_FILE: generated once into the data dir (mode 0600)
#   REDIS_URL       the private Redis bin/dev started, while it runs (unless set)
#   LOG_FORMAT      (console unless set): readable log lines
#   MOTOR_ENERGY_REGEN_PER_HOUR (6 unless set): an agent regains an agentic run's energy
#                   (0.15) in 1.5 minutes, so trying things out never exhausts it for hours

export MOTOR_DATA_DIR="${MOTOR_DATA_DIR:-$root/data}"
mkdir -p "$MOTOR_DATA_DIR"
chmod 700 "$MOTOR_DATA_DIR"
export DEBUG="${DEBUG:-true}"
export MOTOR_ENERGY_REGEN_PER_HOUR="${MOTOR_ENERGY_REGEN_PER_HOUR:-6}"
# readable log lines in data/logs (production keeps the default: one JSON object per line)
export LOG_FORMAT="${LOG_FORMAT:-console}"

if [ -z "${SECRET_KEY:-}" ]; then
  [ -f "$MOTOR_DATA_DIR/secret-key" ] || (umask 077; python3 -c 'import secrets; print(secrets.token_urlsafe(50))' >"$MOTOR_DATA_DIR/secret-key")
  SECRET_KEY="$(cat "$MOTOR_DATA_DIR/secret-key")"
  export SECRET_KEY
fi
if [ -z "${MOTOR_CREDENTIALS_KEY:-}" ] && [ -z "${MOTOR_CREDENTIALS_KEY_FILE:-}" ]; then
  [ -f "$MOTOR_DATA_DIR/credentials.key" ] || (umask 077; uv run --frozen --project "$root" python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())' >"$MOTOR_DATA_DIR/credentials.key")
  export MOTOR_CREDENTIALS_KEY_FILE="$MOTOR_DATA_DIR/credentials.key"
fi
# bin/dev writes this file while its private redis-server runs, and removes it when it stops.
if [ -z "${REDIS_URL:-}" ] && [ -f "$MOTOR_DATA_DIR/redis/url" ]; then
  REDIS_URL="$(cat "$MOTOR_DATA_DIR/redis/url")"
  export REDIS_URL
fi
