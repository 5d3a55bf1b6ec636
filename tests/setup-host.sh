#!/usr/bin/env bash
# Prepares a Debian 12 or Ubuntu 24.04 machine (as root) for cdictk's end-to-end tests. Idempotent and
# quick when everything is already in place, so `make test` runs it every time.
#  - the container tools the tests drive: runc, crun, podman, containerd, busybox-static, gcc,
#    debootstrap and debian-archive-keyring (Ubuntu too checks what comes from Debian with it);
#    buildah (an image with annotations of its own) and uidmap (newuidmap: rootless podman), which
#    podman only recommends;
#    python3-yaml, so that a launcher made for Debian's own Python is tested with the PyYAML apt puts
#    outside its site-packages; systemd, whose systemd-analyze verifies deploy/'s units;
#    containernetworking-plugins, whose bridge the DaemonSet test's nodes give their pods; git, which
#    the image build's tests run in a clone of their own (a copy of the tree may have none);
#  - containerd 2.x and dockerd 28.x from Debian sid, unpacked (not installed) into a cache by
#    tests/fetch-daemons.sh: bookworm's own have no CDI. CDICTK_DAEMONS_CACHE moves the cache; the
#    tests read the same variable;
#  - a Debian bookworm minbase rootfs, built once by tests/fetch-rootfs.sh with debootstrap, for the hook
#    tests (a real ldconfig and ld.so.cache in the image), and the same with Debian's python3
#    (bookworm-python), from which the node runtime's tests build the runtime as the DaemonSet's
#    image does. CDICTK_ROOTFS_CACHE moves the cache; the tests read the same variable. The slow ld cache tests build the other releases' (Debian 11 and 13,
#    Ubuntu 22.04 and 24.04) there when they first run; Ubuntu's need ubuntu-keyring, from apt or,
#    where apt has none (Debian 12), from this release's backports with a private apt state;
#  - crun (and podman on crun) refuses hybrid cgroups while any controller is still on the v2
#    hierarchy ("cgroups in hybrid mode not supported"); on machines without systemd that is hugetlb.
#    We give such controllers a v1 mount, the layout a systemd hybrid host has. runc does not care.
set -euo pipefail

# debian-archive-keyring: on Ubuntu too, to check what comes from Debian (sid's daemons, the rootfs).
packages=(runc crun podman containerd busybox-static gcc patch git debootstrap debian-archive-keyring python3-yaml
  systemd buildah uidmap containernetworking-plugins)

if [[ $(id -u) -ne 0 ]]; then
  echo "setup-host: not root; skipping host setup (the end-to-end tests will be skipped)" >&2
  exit 0
fi
if ! command -v apt-get >/dev/null || ! command -v dpkg-query >/dev/null; then
  echo "setup-host: no apt-get here (not Debian or Ubuntu): install ${packages[*]} with this system's" \
    "package manager; the end-to-end tests skip what is missing" >&2
  exit 0
fi
# `make test` and `make test-slow` may start side by side: one setup at a time,
# on a lock held on this script, since apt-get fails rather than waits on dpkg's lock, and the daemon
# cache is unpacked in place; the second finds everything there and only prints it.
exec 9<"$0"
flock 9

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup-host: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  # With recommends: podman needs conmon, catatonit and a network backend from them.
  apt-get install -y -q "${missing[@]}" >/dev/null
fi
# The package from this release's backports, through a private apt state: the machine's own sources
# stay as they are (Debian 12 has ubuntu-keyring in bookworm-backports only).
ubuntu_keyring_from_backports() {
  local codename tmp
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  [[ -n $codename ]] || return 1
  tmp=$(mktemp -d)
  mkdir -p "$tmp/lists/partial"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian" \
    "$codename-backports main" >"$tmp/sources.list"
  local private=(-o "Dir::State::Lists=$tmp/lists" -o "Dir::Etc::SourceList=$tmp/sources.list"
    -o "Dir::Etc::SourceParts=/nonexistent" -o "APT::Sandbox::User=root")
  if apt-get "${private[@]}" update -q >/dev/null 2>&1 &&
    (cd "$tmp" && apt-get "${private[@]}" download ubuntu-keyring >/dev/null 2>&1); then
    dpkg -i "$tmp"/ubuntu-keyring_*.deb >/dev/null
  else
    false
  fi
  local status=$?
  rm -rf "$tmp"
  return $status
}
if ! dpkg-query -W -f='${Status}' ubuntu-keyring 2>/dev/null | grep -q "install ok installed"; then
  echo "setup-host: installing ubuntu-keyring"
  if apt-cache policy ubuntu-keyring 2>/dev/null | grep -q "Candidate: [0-9]"; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q ubuntu-keyring >/dev/null
  elif ! ubuntu_keyring_from_backports; then
    echo "setup-host: no ubuntu-keyring from apt or this release's backports: the Ubuntu rootfs of" \
      "the slow ld cache tests cannot be checked" >&2
  fi
fi

# Downloads only on the first run (about 6 s, 185 MB unpacked); later runs just print the versions.
"$(dirname "$0")/fetch-daemons.sh" "${CDICTK_DAEMONS_CACHE:-/var/cache/cdictk-tests/daemons}"
# Builds only on the first run (about 60 s for both, 440 MB); later runs just print what is cached.
"$(dirname "$0")/fetch-rootfs.sh" "${CDICTK_ROOTFS_CACHE:-/var/cache/cdictk-tests/rootfs}" bookworm bookworm-python

unified=/sys/fs/cgroup/unified/cgroup.controllers
# cgroupfs files report size 0: test the content, not -s.
if [[ -r $unified && -n "$(cat "$unified")" ]]; then
  controllers=$(cat "$unified")
  for c in $controllers; do
    mkdir -p "/sys/fs/cgroup/$c"
    mountpoint -q "/sys/fs/cgroup/$c" || mount -t cgroup -o "$c" cgroup "/sys/fs/cgroup/$c"
  done
  echo "setup-host: gave $controllers a cgroup v1 mount so that crun accepts this hybrid layout"
fi
