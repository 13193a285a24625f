#!/bin/sh
# Builds the skill runtime (the Python packages MCP skills import inside the sandbox) as a
# virtualenv at $1 (default $MOTOR_SKILL_RUNTIME, else /opt/motor-cortex-runtime) from the pinned
# runtime-requirements.txt next to this script, with the system interpreter /usr/bin/python3,
# the one the sandbox runs. Called by bin/setup-host (bwrap binds the result read-only at the
# same path) and inside the docker image's root filesystem (Dockerfile, build.sh), so both
# backends see the same environment.
#
# Idempotent: a runtime whose recorded requirements hash matches is left alone. Packages come
# from the package registry pip is configured for (PIP_INDEX_URL); only binary wheels are taken,
# so nothing is compiled on the way. Files are world-readable, owned by root, never writable by
# the sandbox.
set -eu

here="$(cd "$(dirname "$0")" && pwd)"
target="${1:-${MOTOR_SKILL_RUNTIME:-/opt/motor-cortex-runtime}}"
requirements="${MC_RUNTIME_REQUIREMENTS:-$here/runtime-requirements.txt}"
python=/usr/bin/python3

want="$(cat "$requirements" | sha256sum | cut -c1-16)"
if [ -f "$target/.requirements-hash" ] && [ "$(cat "$target/.requirements-hash")" = "$want" ]; then
    echo "runtime.sh: $target is up to date ($want)" >&2
    exit 0
fi
"$python" -c 'import venv, ensurepip' 2>/dev/null || {
    echo "runtime.sh: $python lacks venv/ensurepip (apt-get install python3-venv)" >&2
    exit 1
}
work="$target.new.$$"
rm -rf "$work"
trap 'rm -rf "$work"' EXIT
echo "runtime.sh: building the skill runtime at $target ($want)" >&2
"$python" -m venv "$work"
"$work/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir --only-binary=:all: \
    --no-deps -r "$requirements"
"$work/bin/pip" check >&2
# the venv's scripts carry the build path in their shebangs; the interpreter is what counts
# (python -m pytest), so they are rewritten to the final path
grep -rlI "^#!$work/bin/python" "$work/bin" 2>/dev/null | while read -r script; do
    sed -i "1s|^#!$work/|#!$target/|" "$script"
done
sed -i "s|$work|$target|g" "$work/bin/activate" "$work/pyvenv.cfg" 2>/dev/null || true
# pip, setuptools and the caches are not needed at run time
"$work/bin/python" -m pip uninstall --quiet --yes pip >/dev/null 2>&1 || true
find "$work" -name __pycache__ -prune -exec rm -rf {} +
"$work/bin/python" -m compileall -q -j 0 "$work/lib" >/dev/null 2>&1 || true
echo "$want" >"$work/.requirements-hash"
chmod -R a+rX,go-w "$work"
rm -rf "$target.old"
[ -e "$target" ] && mv "$target" "$target.old"
mv "$work" "$target"
rm -rf "$target.old"
trap - EXIT
echo "runtime.sh: built $target ($(du -sh "$target" | cut -f1))" >&2
