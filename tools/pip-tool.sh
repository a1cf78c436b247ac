# Sourced by the install-*.sh scripts that take a tool from PyPI (etcd, protoc): sets `root`
# (the checkout) and `bin` (.tools/bin, created), and defines the two steps they share.

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="$root/.tools/bin"
mkdir -p "$bin"

# lock_tool NAME: holds .tools/.NAME.lock until the script exits. Tests and parallel builds may
# run the same install script from several processes at once: one installs, the others wait.
lock_tool() {
  exec 9>"$root/.tools/.$1.lock"
  flock 9
}

# pip_venv NAME SPEC: installs the PyPI requirement SPEC into its own venv, .tools/NAME, and
# prints the venv's python (for asking the package where its files are).
pip_venv() {
  local venv="$root/.tools/$1"
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$2" >&2
  echo "$venv/bin/python"
}
