#!/bin/sh
# Installs the browser driver (browser-requirements.txt next to this script: Playwright and
# greenlet) as a plain package directory at $1 (default /opt/motor-cortex-browser), the path
# sandbox/inside/browser_host.py puts first on its import path. Runs inside the image's root
# filesystem (chroot for build.sh, RUN for the Dockerfile) with Debian's pip; only binary wheels,
# no dependencies resolved on the way (the file pins them all), nothing compiled.
#
# Idempotent: a directory whose recorded requirements hash matches is left alone. Files are
# world-readable, owned by root, never writable by the sandbox.
set -eu

here="$(cd "$(dirname "$0")" && pwd)"
target="${1:-/opt/motor-cortex-browser}"
requirements="$here/browser-requirements.txt"

want="$(sha256sum <"$requirements" | cut -c1-16)"
if [ -f "$target/.requirements-hash" ] && [ "$(cat "$target/.requirements-hash")" = "$want" ]; then
    echo "browser.sh: $target is up to date ($want)" >&2
    exit 0
fi
work="$target.new.$$"
rm -rf "$work"
trap 'rm -rf "$work"' EXIT
echo "browser.sh: installing the browser driver at $target ($want)" >&2
# --target sidesteps Debian's externally-managed marker: nothing lands in the system's site-packages
/usr/bin/python3 -m pip install --quiet --disable-pip-version-check --no-cache-dir \
    --only-binary=:all: --no-deps --no-compile --target "$work" -r "$requirements"
# console scripts and install records are not needed: browser_host.py imports the packages
rm -rf "$work/bin" "$work"/*.dist-info/RECORD
find "$work" -name __pycache__ -prune -exec rm -rf {} +
echo "$want" >"$work/.requirements-hash"
chmod -R a+rX,go-w "$work"
rm -rf "$target.old"
[ -e "$target" ] && mv "$target" "$target.old"
mv "$work" "$target"
rm -rf "$target.old"
trap - EXIT
echo "browser.sh: installed $target ($(du -sh "$target" | cut -f1))" >&2
