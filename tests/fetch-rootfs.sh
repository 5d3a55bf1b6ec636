#!/usr/bin/env bash
# Builds, once, a Debian bookworm minbase root filesystem for the hook end-to-end tests:
#   CACHE_DIR/bookworm-minbase/{sbin/ldconfig,etc/ld.so.conf,etc/ld.so.cache,...}
# The busybox rootfs has no ldconfig, no ld.so.conf and no glibc; this one is what a real image looks
# like to update-ldcache. debootstrap --variant=minbase takes about 30 s and leaves about 170 MB once its
# downloaded .debs are deleted. Tests never write to it: each one mounts an overlay on top.
# The build goes to a temp dir beside the final place and is renamed in, so an interrupted run never
# leaves a cache that looks complete; a lock makes a second concurrent run wait, then find it built.
# Idempotent: prints what is cached and exits 0 at once when the rootfs is there. Needs root.
set -euo pipefail

cache=${1:?usage: $0 CACHE_DIR}
suite=bookworm
mirror=http://deb.debian.org/debian
rootfs=$cache/$suite-minbase

fail() {
  echo "fetch-rootfs: $*" >&2
  exit 1
}

present() {
  [[ -x $rootfs/sbin/ldconfig && -f $rootfs/etc/debian_version ]]
}

describe() {
  local packages
  packages=$(grep -c '^Package: ' "$rootfs/var/lib/dpkg/status" || true)
  echo "fetch-rootfs: $rootfs: Debian $(cat "$rootfs/etc/debian_version") $suite minbase, $packages packages"
}

if present; then
  describe
  exit 0
fi

[[ $(id -u) -eq 0 ]] || fail "debootstrap needs root"
command -v debootstrap >/dev/null || fail "debootstrap not found (tests/setup-host.sh installs it)"
[[ ! -e $rootfs ]] || fail "$rootfs exists but is not a complete rootfs (no sbin/ldconfig); remove it"

mkdir -p "$cache"
exec 9>"$cache/.$suite-minbase.lock"
flock 9
# Another run may have built it while this one waited for the lock.
if present; then
  describe
  exit 0
fi

work=$(mktemp -d "$cache/.$suite-minbase.XXXXXX")
cleanup() {
  # debootstrap mounts /proc, /sys and device nodes in its target and unmounts them when it exits; a
  # run killed halfway can leave them behind. Unmount whatever is under the temp dir, deepest first,
  # and never let rm cross into another filesystem.
  local mounts
  mounts=$(awk -v dir="$work/" 'index($5, dir) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
  if [[ -n $mounts ]]; then
    while read -r mount; do umount -l "$mount" || true; done <<<"$mounts"
  fi
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT

# One clear line instead of debootstrap's own, when the mirror cannot be reached at all.
if ! wget -q -T 15 -t 2 -O /dev/null "$mirror/dists/$suite/Release"; then
  fail "cannot download $mirror/dists/$suite/Release: is the Debian mirror reachable?"
fi

echo "fetch-rootfs: debootstrap --variant=minbase $suite into $rootfs (about 30 s)"
# Debian's keyring by path: Ubuntu's debootstrap defaults to Ubuntu's.
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[[ -r $keyring ]] || fail "$keyring not found (apt-get install debian-archive-keyring)"
if ! debootstrap --variant=minbase --keyring="$keyring" "$suite" "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1; then
  tail -5 "$work/debootstrap.log" >&2
  fail "debootstrap --variant=minbase $suite $mirror failed"
fi
rm -f "$work/rootfs/var/cache/apt/archives/"*.deb
[[ -x $work/rootfs/sbin/ldconfig ]] || fail "debootstrap left no sbin/ldconfig in the rootfs"
mv -T "$work/rootfs" "$rootfs"
describe
