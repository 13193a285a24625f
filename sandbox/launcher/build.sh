#!/usr/bin/env bash
# Builds the sandbox launcher (motor-launch.c) with the system C compiler and installs it
# root-owned, mode 0755, at DEST (default /usr/local/libexec/motor-cortex/motor-launch), in a
# directory only root can write to: a root worker executes it.
# Usage: sandbox/launcher/build.sh [DEST]
set -euo pipefail
src="$(cd "$(dirname "$0")" && pwd)/motor-launch.c"
dest="${1:-/usr/local/libexec/motor-cortex/motor-launch}"
dir="$(dirname "$dest")"
install -d -m 0755 "$dir"
tmp="$(mktemp "$dir/.motor-launch.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
cc -O2 -Wall -Werror -o "$tmp" "$src"
chmod 0755 "$tmp"
# replaced in one rename: a worker starting a sandbox meanwhile runs the old or the new one
mv -f "$tmp" "$dest"
trap - EXIT
