# Sourced by the scripts: make sure .venv exists and holds this checkout.
# Reinstalls when pyproject.toml changed since the last install.
VENV="${CHORUS_VENV:-$root/.venv}"
extras="${CHORUS_EXTRAS:-}"
stamp="$VENV/.chorus-installed${extras:+-$extras}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ]; then
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$root${extras:+[$extras]}"
  touch "$stamp"
fi
