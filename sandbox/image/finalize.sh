#!/bin/sh
# Runs INSIDE the image's root filesystem (chroot for build.sh, RUN for the Dockerfile) so both
# build paths end with the same user, layout and trimmed files.
set -eu

SANDBOX_UID=10001
SANDBOX_USER=sandbox

# unprivileged user and group the sandboxed process runs as; no login shell, no password
if ! getent group "$SANDBOX_USER" >/dev/null 2>&1; then
    groupadd --gid "$SANDBOX_UID" "$SANDBOX_USER"
fi
if ! getent passwd "$SANDBOX_USER" >/dev/null 2>&1; then
    useradd --uid "$SANDBOX_UID" --gid "$SANDBOX_UID" --no-create-home \
        --home-dir /workspace --shell /usr/sbin/nologin "$SANDBOX_USER"
fi

# mount points: the workspace (rw), the in-sandbox scripts (ro, bind-mounted at run time so the
# host checkout stays the one source of truth) and the egress bridge's socket directory
mkdir -p /workspace /opt/motor-cortex /run/motor-cortex
chown "$SANDBOX_UID:$SANDBOX_UID" /workspace
chmod 0755 /opt/motor-cortex /run/motor-cortex

# nothing in the sandbox should be able to gain privileges through a setuid/setgid binary, even
# though no-new-privileges already neutralises them
find / -xdev -type f \( -perm -4000 -o -perm -2000 \) -exec chmod ug-s {} + 2>/dev/null || true

# keep the image small: no docs, man pages, locales, apt lists or caches
rm -rf /usr/share/doc/* /usr/share/man/* /usr/share/info/* /usr/share/lintian/* \
    /usr/share/locale/* /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old \
    /var/log/* /tmp/* /root/.cache 2>/dev/null || true
