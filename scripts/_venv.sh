# Sourced by the scripts: make sure .venv exists and holds this checkout.
# Reinstalls when pyproject.toml changed since the last install. Scripts
# started together (several ./scripts/chorus at once) install one at a time.
VENV="${CHORUS_VENV:-$root/.venv}"
extras="${CHORUS_EXTRAS:-}"
stamp="$VENV/.chorus-installed${extras:+-$extras}"

_chorus_installed() {
  # The test install holds everything the plain one does.
  local s
  for s in "$stamp" "$VENV/.chorus-installed-test"; do
    if [ -f "$s" ] && [ ! "$root/pyproject.toml" -nt "$s" ] && [ -x "$VENV/bin/python" ]; then
      return 0
    fi
  done
  return 1
}

if ! _chorus_installed; then
  mkdir -p "$VENV"
  if command -v flock >/dev/null 2>&1; then
    exec 9>"$VENV/.install-lock"
    flock 9
  fi
  if ! _chorus_installed; then  # another script may have installed meanwhile
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$root${extras:+[$extras]}"
    touch "$stamp"
  fi
  if command -v flock >/dev/null 2>&1; then
    exec 9>&-
  fi
fi
