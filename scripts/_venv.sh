# Sourced by the scripts: make sure .venv holds exactly what uv.lock says.
#
# uv.lock is the truth (docs/development.md): every package, with its version
# and hashes, for the runtime, the test, lint and type tools and the build
# backend. Nothing is resolved here: `uv sync --locked` installs the lock and
# refuses to run when pyproject.toml and the lock disagree. uv itself comes
# from PyPI, pinned by hash in scripts/uv-requirements.txt, into a venv of its
# own (.venv-uv), so that syncing .venv never removes the tool doing it.
#
# A changed uv.lock, pyproject.toml or extras set installs again; scripts
# started together (several ./scripts/chorus at once) install one at a time.
VENV="${CHORUS_VENV:-$root/.venv}"
UV_VENV="${CHORUS_UV_VENV:-$root/.venv-uv}"
extras="${CHORUS_EXTRAS:-}"
stamp="$VENV/.chorus-installed${extras:+-$extras}"

_chorus_here() {
  # chorus is installed editable: .venv must point at this checkout's src/ (a
  # checkout moved, or a .venv another checkout installed into, imports chorus
  # from elsewhere or not at all). Compared as physical paths: a symlink to the
  # checkout is the same checkout.
  local pth src here
  here="$(cd "$root/src" && pwd -P)"
  for pth in "$VENV"/lib/python*/site-packages/__editable__.chorus-*.pth; do
    [ -f "$pth" ] || continue
    src="$(head -n 1 "$pth")"
    if [ -d "$src" ] && [ "$(cd "$src" && pwd -P)" = "$here" ]; then
      return 0
    fi
  done
  return 1
}

_chorus_installed() {
  # The test install holds everything the plain one does.
  local s
  _chorus_here || return 1
  for s in "$stamp" "$VENV/.chorus-installed-test"; do
    if [ -f "$s" ] && [ -x "$VENV/bin/python" ] \
      && [ ! "$root/pyproject.toml" -nt "$s" ] && cmp -s "$s" "$root/uv.lock"; then
      return 0
    fi
  done
  return 1
}

_chorus_uv() {
  local want
  want="$(sed -n 's/^uv==\([^ ]*\).*/\1/p' "$root/scripts/uv-requirements.txt")"
  if [ -x "$UV_VENV/bin/uv" ] && [ "$("$UV_VENV/bin/uv" --version 2>/dev/null | cut -d' ' -f2)" = "$want" ]; then
    return 0
  fi
  rm -rf "$UV_VENV"
  python3 -m venv "$UV_VENV"
  "$UV_VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    --require-hashes -r "$root/scripts/uv-requirements.txt"
}

if ! _chorus_installed; then
  mkdir -p "$(dirname "$VENV")"
  if command -v flock >/dev/null 2>&1; then
    exec 9>"$root/.venv-install-lock"
    flock 9
  fi
  if ! _chorus_installed; then  # another script may have installed meanwhile
    if [ -z "$extras" ] && [ -f "$VENV/.chorus-installed-test" ]; then
      # The lock changed and .venv held the test tools: keep them (a plain sync
      # is exact and would remove them until the next ./scripts/test).
      extras=test
      stamp="$VENV/.chorus-installed-test"
    fi
    started=$SECONDS
    echo "== setting up $VENV from uv.lock (first run or changed lock: about a minute)" >&2
    _chorus_uv
    # The interpreter itself, not a shim (pyenv's python3 is a script): uv
    # compares it with the one .venv was made from, and a shim path never
    # matches, which would remove and rebuild .venv on every install.
    python="$(python3 -c 'import sys; print(sys.executable)')"
    # Never download a Python (no network but the package registries).
    export UV_PYTHON_DOWNLOADS=never UV_PROJECT_ENVIRONMENT="$VENV"
    if ! "$UV_VENV/bin/uv" lock --check --offline --quiet --project "$root" 2>/dev/null; then
      echo "pyproject.toml and uv.lock disagree: run '$UV_VENV/bin/uv lock' after changing" \
        "a dependency, or undo the change (docs/development.md, \"Adding a dependency\")." >&2
      echo "Nothing was installed; .venv is as it was." >&2
      exit 1
    fi
    "$UV_VENV/bin/uv" sync --project "$root" --locked --no-install-project --quiet \
      --python "$python" ${extras:+--extra "$extras"}
    # chorus itself last, built by the locked setuptools just installed.
    "$UV_VENV/bin/uv" sync --project "$root" --locked --quiet \
      --python "$python" ${extras:+--extra "$extras"}
    rm -f "$VENV"/.chorus-installed*
    cp "$root/uv.lock" "$stamp"
    echo "== $VENV ready in $((SECONDS - started)) s" >&2
  fi
  if command -v flock >/dev/null 2>&1; then
    exec 9>&-
  fi
fi
