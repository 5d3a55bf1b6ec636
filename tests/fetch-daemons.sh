#!/usr/bin/env bash
# Unpacks containerd and dockerd from Debian sid into CACHE_DIR for the daemon end-to-end tests:
#   CACHE_DIR/containerd-sid/usr/bin/{containerd,ctr,containerd-shim-runc-v2}
#   CACHE_DIR/docker.io-sid/usr/sbin/dockerd
# Bookworm's containerd 1.6 has no CDI and no config version 3, and its docker.io 20.10 has no CDI.
# sid's builds are Go binaries that need only glibc >= 2.34, so they run unmodified on bookworm.
# They are downloaded and unpacked, never installed: apt runs with a private config (its own
# sources.list, lists and cache in a temp dir), so the machine's apt sources and dpkg state stay as
# they were. Idempotent: does nothing but print the versions once both binaries are in the cache.
set -euo pipefail

cache=${1:?usage: $0 CACHE_DIR}
containerd=$cache/containerd-sid/usr/bin/containerd
dockerd=$cache/docker.io-sid/usr/sbin/dockerd

fail() {
  echo "fetch-daemons: $*" >&2
  exit 1
}

print_versions() {
  echo "fetch-daemons: $("$containerd" --version 2>&1 | head -1)"
  echo "fetch-daemons: $("$dockerd" --version 2>&1 | head -1)"
}

if [[ -x $containerd && -x $dockerd ]]; then
  print_versions
  exit 0
fi

for tool in apt-get dpkg-deb; do
  command -v "$tool" >/dev/null || fail "$tool not found; this script needs Debian's apt"
done

mkdir -p "$cache"
work=$(mktemp -d "$cache/.fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"/lists/partial "$work"/cache/archives/partial "$work"/debs
# Signed-by Debian's keyring by path: on Ubuntu the host's apt trusts no Debian key.
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[[ -r $keyring ]] || fail "$keyring not found (apt-get install debian-archive-keyring)"
echo "deb [signed-by=$keyring] http://deb.debian.org/debian sid main" >"$work/sources.list"
apt_options=(
  -o Dir::Etc::SourceList="$work/sources.list"
  -o Dir::Etc::SourceParts=/dev/null
  -o Dir::State::Lists="$work/lists"
  -o Dir::Cache="$work/cache"
  # apt drops to the _apt user for downloads, which cannot write to a root-owned temp dir.
  -o APT::Sandbox::User=root
)

echo "fetch-daemons: downloading containerd and docker.io from Debian sid into $cache"
if ! apt-get "${apt_options[@]}" -q --error-on=any update >"$work/update.log" 2>&1; then
  tail -5 "$work/update.log" >&2
  fail "apt-get update of Debian sid failed (is deb.debian.org reachable?)"
fi
if ! (cd "$work/debs" && apt-get "${apt_options[@]}" -q download containerd/sid docker.io/sid) \
  >"$work/download.log" 2>&1; then
  tail -5 "$work/download.log" >&2
  fail "apt-get download containerd/sid docker.io/sid failed"
fi

for package in containerd docker.io; do
  debs=("$work/debs/${package}"_*.deb)
  [[ -f ${debs[0]} ]] || fail "no $package .deb was downloaded"
  out=$cache/$package-sid
  # Unpack beside the final place and rename, so an interrupted run never leaves a cache that
  # looks complete.
  rm -rf "$out" "$out.partial"
  dpkg-deb -x "${debs[0]}" "$out.partial" || fail "dpkg-deb -x ${debs[0]##*/} failed"
  mv "$out.partial" "$out"
  echo "fetch-daemons: unpacked ${debs[0]##*/}"
done

[[ -x $containerd ]] || fail "$containerd missing after unpacking containerd/sid"
[[ -x $dockerd ]] || fail "$dockerd missing after unpacking docker.io/sid"
"$containerd" --version >/dev/null 2>&1 || fail "$containerd does not run here: $("$containerd" --version 2>&1 | head -3)"
"$dockerd" --version >/dev/null 2>&1 || fail "$dockerd does not run here: $("$dockerd" --version 2>&1 | head -3)"
print_versions
