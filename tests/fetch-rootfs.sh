#!/usr/bin/env bash
# Builds, once, the minbase root filesystems of the hook tests, one per release asked for (bookworm
# when none is):
#   CACHE_DIR/minbase-SUITE/{sbin/ldconfig,etc/ld.so.conf,etc/ld.so.cache,...}
# bullseye, bookworm and trixie from Debian's mirror, jammy and noble from Ubuntu's: debootstrap
# --variant=minbase plus a few libraries (PACKAGES), so that each image's own glibc and ldconfig are
# what the ld cache writer is held against. bookworm-python is not a release but the base of the
# DaemonSet's image and of the node runtime (cdictk.noderuntime): bookworm minbase plus Debian's
# python3, with venv and pip's certificates (PYTHON_PACKAGES; dependencies only, no recommends, as
# debootstrap installs them), about 40 s and 180 MB. A Debian 11 image is not merged-/usr, as Debian's own
# bullseye images are not. Each takes 20-60 s (several are built at once) and leaves 130-220 MB once
# its downloaded .debs are deleted. Tests never write to them: each one mounts an overlay on top.
# A build goes to a temp dir beside the final place and is renamed in, so an interrupted run never
# leaves a rootfs that looks complete; a lock per release makes a second concurrent run wait, then
# find it built. Idempotent: prints what is cached and exits 0 at once when every rootfs is there.
# Needs root. Exit status 1, with one line per release that failed, when any did.
set -euo pipefail

cache=${1:?usage: $0 CACHE_DIR [SUITE...]}
shift
suites=("$@")
((${#suites[@]})) || suites=(bookworm)
# What the hook tests look for in an image beside minbase: libraries with SONAME links of their own.
PACKAGES=libgomp1,libnuma1,libglvnd0,libegl1
# The image's Python: the interpreter and its standard library, ensurepip's wheels for a venv, and the
# CA certificates pip checks an index with.
PYTHON_PACKAGES=python3,python3-venv,ca-certificates
DEBIAN=http://deb.debian.org/debian
UBUNTU=http://archive.ubuntu.com/ubuntu
STAMP=.cdictk-rootfs # in the rootfs: the recipe it was built from

fail() {
  echo "fetch-rootfs: $*" >&2
  exit 1
}

# name -> "release mirror keyring script debootstrap-options packages"
recipe() {
  local debian_keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  local ubuntu_keyring=/usr/share/keyrings/ubuntu-archive-keyring.gpg
  # Ubuntu's releases all use debootstrap's "gutsy" script; Debian 12's debootstrap predates noble.
  local ubuntu_script=/usr/share/debootstrap/scripts/gutsy
  case $1 in
    bullseye) echo "$1 $DEBIAN $debian_keyring - --no-merged-usr $PACKAGES" ;;
    bookworm | trixie) echo "$1 $DEBIAN $debian_keyring - - $PACKAGES" ;;
    bookworm-python) echo "bookworm $DEBIAN $debian_keyring - - $PYTHON_PACKAGES" ;;
    jammy | noble) echo "$1 $UBUNTU $ubuntu_keyring $ubuntu_script --components=main $PACKAGES" ;;
    *) return 1 ;;
  esac
}

present() {
  local rootfs=$1 stamp=$2
  [[ -x $rootfs/sbin/ldconfig && -f $rootfs/$STAMP && $(cat "$rootfs/$STAMP") == "$stamp" ]]
}

describe() {
  local rootfs=$1 suite=$2 packages version
  packages=$(grep -c '^Package: ' "$rootfs/var/lib/dpkg/status" || true)
  version=$(sed -n 's/^VERSION="\(.*\)"$/\1/p' "$rootfs/etc/os-release" 2>/dev/null || true)
  echo "fetch-rootfs: $rootfs: $suite (${version:-$(cat "$rootfs/etc/debian_version")}) minbase, $packages packages"
}

build() {
  local suite=$1 rootfs=$cache/minbase-$1
  local spec release mirror keyring script options packages stamp
  spec=$(recipe "$suite") ||
    fail "$suite: unknown release (bullseye, bookworm, trixie, jammy, noble; or bookworm-python)"
  read -r release mirror keyring script options packages <<<"$spec"
  # The release's own stamps stay as they were, so that a cached rootfs is not built again.
  stamp="$release $mirror --variant=minbase --include=$packages $options"
  if present "$rootfs" "$stamp"; then
    describe "$rootfs" "$suite"
    return 0
  fi
  [[ -r $keyring ]] || fail "$suite: $keyring not found (tests/setup-host.sh installs it)"
  exec 9>"$cache/.minbase-$suite.lock"
  flock 9
  # Another run may have built it while this one waited for the lock.
  if present "$rootfs" "$stamp"; then
    describe "$rootfs" "$suite"
    return 0
  fi
  local work
  work=$(mktemp -d "$cache/.minbase-$suite.XXXXXX")
  # shellcheck disable=SC2064 # the temp dir's name, now
  trap "cleanup '$work'" EXIT
  # One clear line instead of debootstrap's own, when the mirror cannot be reached at all.
  wget -q -T 15 -t 2 -O /dev/null "$mirror/dists/$release/Release" ||
    fail "$suite: cannot download $mirror/dists/$release/Release: is the mirror reachable?"
  local args=(--variant=minbase "--include=$packages" "--keyring=$keyring")
  [[ $options == - ]] || args+=("$options")
  args+=("$release" "$work/rootfs" "$mirror")
  [[ $script == - ]] || args+=("$script")
  if ! debootstrap "${args[@]}" >"$work/debootstrap.log" 2>&1; then
    tail -5 "$work/debootstrap.log" >&2
    fail "$suite: debootstrap ${args[*]} failed"
  fi
  rm -f "$work/rootfs/var/cache/apt/archives/"*.deb
  [[ -x $work/rootfs/sbin/ldconfig ]] || fail "$suite: debootstrap left no sbin/ldconfig in the rootfs"
  echo "$stamp" >"$work/rootfs/$STAMP"
  # A rootfs of an older recipe is replaced (a test with an overlay on it meanwhile may fail).
  if [[ -e $rootfs ]]; then
    mv -T "$rootfs" "$work/stale"
  fi
  mv -T "$work/rootfs" "$rootfs"
  describe "$rootfs" "$suite"
}

cleanup() {
  # debootstrap mounts /proc, /sys and device nodes in its target and unmounts them when it exits; a
  # run killed halfway can leave them behind. Unmount whatever is under the temp dir, deepest first,
  # and never let rm cross into another filesystem.
  local work=$1 mounts
  mounts=$(awk -v dir="$work/" 'index($5, dir) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
  if [[ -n $mounts ]]; then
    while read -r mount; do umount -l "$mount" || true; done <<<"$mounts"
  fi
  rm -rf --one-file-system "$work"
}

[[ $(id -u) -eq 0 ]] || fail "debootstrap needs root"
command -v debootstrap >/dev/null || fail "debootstrap not found (tests/setup-host.sh installs it)"
mkdir -p "$cache"

# Every release at once, each in its own subshell (its own lock and cleanup): most of the time is
# downloading and unpacking, which overlap well even on two cores.
pids=()
for suite in "${suites[@]}"; do
  (build "$suite") &
  pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do
  wait "$pid" || failed=1
done
exit "$failed"
