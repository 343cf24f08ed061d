#!/usr/bin/env bash
# Release build: static engine, agent-node and paddock-supervisor binaries,
# versioned, and (with --images) the images of deploy/Dockerfile.
#
#   scripts/release.sh [--version V] [--out DIR] [--images] [--tag-latest]
#
# V defaults to `git describe --tags --always --dirty`. Binaries go to
# DIR (default dist/V): CGO_ENABLED=0, -trimpath, and -ldflags -X with the
# version and the commit (git rev-parse HEAD), which `engine --version`,
# `agent-node --version` and `paddock-supervisor -version` print. With
# --images it builds paddock/engine:V, paddock/agent-node:V and
# paddock/supervisor:V FROM scratch on the local Docker engine (no
# registry is needed: the Go toolchain is this host's, see
# deploy/README.md "Images and the release build"), and --tag-latest
# tags them :latest too. It prints DIR on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

version="" out="" images=false latest=false
while [ $# -gt 0 ]; do
  case "$1" in
    --version) version="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --images) images=true; shift ;;
    --tag-latest) latest=true; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "release: unknown argument $1" >&2; exit 2 ;;
  esac
done
commit=$(git rev-parse HEAD)
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then commit="$commit-dirty"; fi
version=${version:-$(git describe --tags --always --dirty)}
case "$version" in
  *[!A-Za-z0-9._-]*|"") echo "release: version $version: letters, digits, . _ - only (it is an image tag)" >&2; exit 2 ;;
esac
out=${out:-dist/$version}
mkdir -p "$out"

pkg=github.com/paddock-dev/paddock/cmd/internal/buildinfo
for b in engine agent-node paddock-supervisor; do
  x="-X $pkg.version=$version -X $pkg.commit=$commit"
  [ "$b" = paddock-supervisor ] && x="-X main.version=$version -X main.commit=$commit"
  echo "release: go build ./cmd/$b ($version, $commit)" >&2
  CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w $x" -o "$out/$b" "./cmd/$b"
done

if $images; then
  # The build context is a small directory of its own: the binaries, the
  # host's CA bundle (for tls:// URLs that use the system roots) and a
  # root file system skeleton (/tmp, users root and nobody).
  ctx=$(mktemp -d)
  trap 'rm -rf "$ctx"' EXIT
  cp "$out/engine" "$out/agent-node" "$out/paddock-supervisor" deploy/Dockerfile "$ctx/"
  mkdir -p "$ctx/rootfs/etc/ssl/certs" "$ctx/rootfs/tmp" "$ctx/rootfs/var/lib/paddock"
  chmod 1777 "$ctx/rootfs/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/var/lib/paddock:/sbin/nologin\n' > "$ctx/rootfs/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$ctx/rootfs/etc/group"
  if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    cp /etc/ssl/certs/ca-certificates.crt "$ctx/rootfs/etc/ssl/certs/"
  else
    echo "release: no /etc/ssl/certs/ca-certificates.crt (Debian: apt-get install ca-certificates); the images get no CA bundle" >&2
    : > "$ctx/rootfs/etc/ssl/certs/ca-certificates.crt"
  fi
  for t in engine agent-node supervisor; do
    echo "release: docker build paddock/$t:$version" >&2
    docker build -q --target "$t" --label "org.opencontainers.image.version=$version" \
      --label "org.opencontainers.image.revision=$commit" -t "paddock/$t:$version" "$ctx" >&2
    if $latest; then docker tag "paddock/$t:$version" "paddock/$t:latest"; fi
  done
fi
echo "$out"
