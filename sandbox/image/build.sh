#!/usr/bin/env bash
# Builds the Docker sandbox image without any registry: debootstrap a minimal Debian bookworm,
# install packages.txt into it with apt (Chromium, node and npm included), the skill runtime and the browser
# driver (Playwright, browser.sh), finalise it (sandbox user 10001, mount points, trimmed docs) and `docker import` it.
#
# Usage: sandbox/image/build.sh [IMAGE_TAG]
#   IMAGE_TAG defaults to $SANDBOX_DOCKER_IMAGE, else motor-cortex-sandbox:local.
# Environment:
#   MC_DEBIAN_MIRROR  Debian mirror URL (default: the first one in this host's apt sources that
#                     answers, else http://deb.debian.org/debian)
#   MC_CACHE_DIR      where the rootfs tarball is cached (default ~/.cache/motor-cortex)
#
# Idempotent: an image carrying the label motor-cortex.inputs=<hash of the build inputs> is left
# alone, and a cached rootfs tarball for the same hash skips debootstrap. Any failure exits
# non-zero with a message on stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
image="${1:-${SANDBOX_DOCKER_IMAGE:-motor-cortex-sandbox:local}}"
suite=bookworm
cache_dir="${MC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/motor-cortex}"
started=$(date +%s)

say() { echo "build.sh [$(( $(date +%s) - started ))s] $*" >&2; }
die() { echo "build.sh: ERROR: $*" >&2; exit 1; }

command -v docker >/dev/null 2>&1 || die "the docker CLI is not installed (apt-get install docker.io)"
docker info >/dev/null 2>&1 || die "no Docker engine answers (start dockerd, e.g. bin/docker-engine)"

packages="$(grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "$here/packages.txt" | tr -d ' \t' | paste -sd, -)"
[ -n "$packages" ] || die "$here/packages.txt lists no packages"

# the label ties the image to exactly these inputs; editing any of them triggers a rebuild
inputs_hash="$(cat "$here/build.sh" "$here/Dockerfile" "$here/packages.txt" "$here/finalize.sh" \
    "$here/runtime.sh" "$here/runtime-requirements.txt" "$here/browser.sh" \
    "$here/browser-requirements.txt" "$here/../browser_policy.json" | sha256sum | cut -c1-16)"

current="$(docker image inspect --format '{{ index .Config.Labels "motor-cortex.inputs" }}' "$image" 2>/dev/null || true)"
if [ "$current" = "$inputs_hash" ]; then
    say "$image is up to date (inputs $inputs_hash)"
    exit 0
fi
say "building $image (inputs $inputs_hash; existing image: ${current:-none})"

pick_mirror() {
    if [ -n "${MC_DEBIAN_MIRROR:-}" ]; then echo "$MC_DEBIAN_MIRROR"; return; fi
    local candidates=() uri
    # deb822 sources (URIs: lines) and one-line sources (deb URL suite ...)
    while read -r uri; do candidates+=("$uri"); done < <(
        { grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{for (i=2;i<=NF;i++) print $i}'
          grep -h '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
            | sed 's/\[[^]]*\]//' | awk '{print $2}'
        } | grep -E '/debian/?$' || true)
    candidates+=("http://deb.debian.org/debian")
    for uri in "${candidates[@]}"; do
        uri="${uri%/}"
        if curl -fsS --max-time 10 -o /dev/null "$uri/dists/$suite/Release"; then
            echo "$uri"; return
        fi
        say "mirror $uri does not answer for $suite, trying the next one"
    done
    return 1
}

# the rootfs depends only on the suite, the packages and finalize.sh, so editing this script or the
# Dockerfile re-imports without re-running debootstrap
rootfs_hash="$( { echo "$suite"; cat "$here/packages.txt" "$here/finalize.sh" "$here/runtime.sh" \
    "$here/runtime-requirements.txt" "$here/browser.sh" "$here/browser-requirements.txt" \
    "$here/../browser_policy.json"; } \
    | sha256sum | cut -c1-16)"
rootfs_tar="$cache_dir/rootfs-$rootfs_hash.tar"
if [ -s "$rootfs_tar" ]; then
    say "using cached rootfs $rootfs_tar"
else
    [ "$(id -u)" = 0 ] || die "debootstrap needs root (run as root, or provide $rootfs_tar)"
    command -v debootstrap >/dev/null 2>&1 || die "debootstrap is not installed (apt-get install debootstrap)"
    mirror="$(pick_mirror)" || die "no Debian mirror answers for $suite (set MC_DEBIAN_MIRROR)"
    mkdir -p "$cache_dir"
    work="$(mktemp -d "$cache_dir/build.XXXXXX")"
    # /proc is mounted in the rootfs while packages install; it must be gone before the rootfs
    # is removed or packed
    trap 'umount "$work/rootfs/proc" 2>/dev/null || true; rm -rf "$work"' EXIT
    # debootstrap's --include resolver takes no alternatives ("libgtk-3-0 | a portal backend",
    # which chromium depends on), so it lays down the bare minbase system and apt inside it
    # installs packages.txt with the real resolver
    say "debootstrap --variant=minbase $suite from $mirror"
    if ! debootstrap --variant=minbase "$suite" "$work/rootfs" "$mirror" \
            >"$work/debootstrap.log" 2>&1; then
        tail -n 30 "$work/debootstrap.log" >&2
        die "debootstrap failed (log above)"
    fi
    cp /etc/resolv.conf "$work/rootfs/etc/resolv.conf" 2>/dev/null || true
    # the point-release and security suites too: Debian ships Chromium's fixes through security
    {
        echo "deb $mirror $suite main"
        echo "deb $mirror $suite-updates main"
        security="${mirror%/debian}/debian-security"
        if curl -fsS --max-time 10 -o /dev/null "$security/dists/$suite-security/Release"; then
            echo "deb $security $suite-security main"
        else
            say "no $suite-security next to $mirror; installing without security updates"
        fi
    } >"$work/rootfs/etc/apt/sources.list"
    # no daemon may start inside the chroot while packages install
    printf '#!/bin/sh\nexit 101\n' >"$work/rootfs/usr/sbin/policy-rc.d"
    chmod 0755 "$work/rootfs/usr/sbin/policy-rc.d"
    mount -t proc proc "$work/rootfs/proc" || die "could not mount /proc in the rootfs"
    say "apt-get install --no-install-recommends $packages (takes a few minutes)"
    if ! chroot "$work/rootfs" env DEBIAN_FRONTEND=noninteractive LC_ALL=C sh -c \
            "apt-get update && apt-get install -y --no-install-recommends $(echo "$packages" | tr , ' ') && apt-get clean" \
            >"$work/apt.log" 2>&1; then
        tail -n 30 "$work/apt.log" >&2
        umount "$work/rootfs/proc" 2>/dev/null || true
        die "installing packages.txt inside the rootfs failed (log above)"
    fi
    umount "$work/rootfs/proc" || die "could not unmount /proc in the rootfs"
    rm -f "$work/rootfs/usr/sbin/policy-rc.d"
    say "installing the skill runtime (runtime-requirements.txt) at /opt/motor-cortex-runtime"
    mkdir -p "$work/rootfs/tmp/image"
    cp "$here/runtime.sh" "$here/runtime-requirements.txt" "$here/browser.sh" \
        "$here/browser-requirements.txt" "$work/rootfs/tmp/image/"
    # a host that reaches the registry through a TLS-inspecting proxy names its CA bundle in
    # PIP_CERT (or REQUESTS_CA_BUNDLE). Debian's pip inside the rootfs trusts the system bundle
    # whatever PIP_CERT says, so the host's bundle stands in for it during the install and the
    # image keeps its own afterwards.
    cert="${PIP_CERT:-${REQUESTS_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}}"
    system_ca="$work/rootfs/etc/ssl/certs/ca-certificates.crt"
    if [ -f "$cert" ] && [ -f "$system_ca" ]; then
        cp "$system_ca" "$work/ca-certificates.crt.image"
        cp "$cert" "$system_ca"
    fi
    chroot "$work/rootfs" env -u PIP_FIND_LINKS -u PIP_CERT \
        PIP_INDEX_URL="${PIP_INDEX_URL:-https://pypi.org/simple}" \
        /bin/sh /tmp/image/runtime.sh /opt/motor-cortex-runtime \
        || die "the skill runtime could not be installed inside the rootfs"
    say "installing the browser driver (browser-requirements.txt) at /opt/motor-cortex-browser"
    chroot "$work/rootfs" env -u PIP_FIND_LINKS -u PIP_CERT \
        PIP_INDEX_URL="${PIP_INDEX_URL:-https://pypi.org/simple}" \
        /bin/sh /tmp/image/browser.sh /opt/motor-cortex-browser \
        || die "the browser driver could not be installed inside the rootfs"
    if [ -f "$work/ca-certificates.crt.image" ]; then
        cp "$work/ca-certificates.crt.image" "$system_ca"
    fi
    rm -rf "$work/rootfs/tmp/image"
    # Chromium's managed policy is part of the image too (sessions also mount the same file
    # there), so no browser ever starts in it without the policy (no file://, no DNS-over-HTTPS)
    install -D -m 0644 "$here/../browser_policy.json" \
        "$work/rootfs/etc/chromium/policies/managed/motor-cortex.json"
    say "finalising the rootfs (user 10001, mount points, trimming)"
    cp "$here/finalize.sh" "$work/rootfs/finalize.sh"
    chroot "$work/rootfs" /bin/sh /finalize.sh || die "finalize.sh failed inside the rootfs"
    rm -f "$work/rootfs/finalize.sh"
    say "packing the rootfs"
    tar -C "$work/rootfs" --numeric-owner -cf "$work/rootfs.tar" .
    # keep only the current tarball: older ones belong to inputs that no longer exist
    find "$cache_dir" -maxdepth 1 -name 'rootfs-*.tar' -delete
    mv "$work/rootfs.tar" "$rootfs_tar"
    rm -rf "$work"
    trap - EXIT
    say "cached rootfs at $rootfs_tar ($(du -h "$rootfs_tar" | cut -f1))"
fi

old_id="$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
say "docker import into $image"
docker import \
    --change 'USER 10001:10001' \
    --change 'WORKDIR /workspace' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' \
    --change 'CMD ["/bin/sh"]' \
    --change "LABEL motor-cortex.inputs=$inputs_hash" \
    - "$image" <"$rootfs_tar" >/dev/null || die "docker import failed"

check="$(docker run --rm --network none "$image" sh -c 'id -u; python3 -c "print(1+1)"; /opt/motor-cortex-runtime/bin/python3 -c "import mcp.server.fastmcp, httpx, bs4, lxml, yaml, toml, pandas, PIL, pytest" || exit 1; python3 -I -c "import sys; sys.path.insert(0, \"/opt/motor-cortex-browser\"); import playwright.sync_api, greenlet" || exit 1; /usr/lib/chromium/chromium --version >/dev/null || exit 1; test -s /etc/chromium/policies/managed/motor-cortex.json || exit 1; for c in curl jq grep sort uniq wc head tail cat echo date node npm; do command -v $c; done | wc -l')" \
    || die "the new image does not start"
[ "$check" = "$(printf '10001\n2\n13')" ] || die "the new image failed its smoke check: $check"
if [ -n "$old_id" ] && [ "$old_id" != "$(docker image inspect --format '{{.Id}}' "$image")" ]; then
    # the superseded image is now untagged; drop it unless a container still uses it
    docker image rm "$old_id" >/dev/null 2>&1 || true
fi
say "built $image ($(docker image inspect --format '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}'))"
