#!/usr/bin/env bash
# Installs pgvector (the PostgreSQL vector extension the skill index stores embeddings with) for
# every PostgreSQL server major version installed on this Debian/Ubuntu host, as root:
#   1. the distribution's package postgresql-<major>-pgvector when apt has one (Debian trixie and
#      later, Ubuntu 24.04 and later, or the PGDG repository when it is configured);
#   2. otherwise (Debian bookworm ships none) the Debian source package `pgvector`, fetched from
#      the Debian archive's next release and built into postgresql-<major>-pgvector with the
#      distribution's own tools (pg_buildext), then installed with dpkg.
# Nothing happens when no PostgreSQL server is installed (SQLite or a remote database: a remote
# server needs the extension installed there) or when the extension is already present.
set -euo pipefail

pgvector_install() {
  local majors=() v
  for v in /usr/lib/postgresql/*/bin/postgres; do
    [ -e "$v" ] || continue
    v="${v#/usr/lib/postgresql/}"; v="${v%%/*}"
    [ -e "/usr/share/postgresql/$v/extension/vector.control" ] || majors+=("$v")
  done
  [ ${#majors[@]} -gt 0 ] || return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "setup-host: pgvector missing for PostgreSQL ${majors[*]}; install postgresql-<major>-pgvector (dense skill retrieval needs it)" >&2
    return 0
  fi
  for v in "${majors[@]}"; do
    if [ -n "$(apt-cache policy "postgresql-$v-pgvector" 2>/dev/null | awk '/Candidate:/ && $2 != "(none)" {print $2}')" ]; then
      echo "setup-host: installing postgresql-$v-pgvector with apt-get" >&2
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "postgresql-$v-pgvector" >/dev/null
    else
      pgvector_build_from_debian_source "$v"
    fi
  done
}

pgvector_build_from_debian_source() {
  local v="$1" work src=/etc/apt/sources.list.d/motor-pgvector-src.sources
  echo "setup-host: building postgresql-$v-pgvector from the Debian source package pgvector" >&2
  work="$(mktemp -d)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    dpkg-dev debhelper "postgresql-server-dev-$v" postgresql-server-dev-all >/dev/null
  cat > "$src" <<'SOURCES'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  apt-get update -qq -o Dir::Etc::sourcelist="$src" -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0
  (cd "$work" && apt-get source -qq --download-only pgvector 2>/dev/null && dpkg-source -x ./*.dsc build >/dev/null)
  rm -f "$src"
  apt-get update -qq
  (
    cd "$work/build"
    echo "$v" > debian/pgversions
    pg_buildext updatecontrol >/dev/null
    DEB_BUILD_OPTIONS=nocheck DEB_BUILD_PROFILES=nocheck dpkg-buildpackage -us -uc -b -d >"$work/build.log" 2>&1 \
      || { tail -20 "$work/build.log" >&2; exit 1; }
  )
  dpkg -i "$work"/postgresql-"$v"-pgvector_*.deb >/dev/null
  rm -rf "$work"
}
